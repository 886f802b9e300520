#!/usr/bin/env bash
# Runs every test of the workspace, PostgreSQL and headless-browser tests included.
#
# Uses $DATABASE_URL when set, otherwise PostgreSQL at 127.0.0.1:5432 as user postgres.
# Fails with a clear message (it does not skip) when no PostgreSQL answers there.
set -euo pipefail
cd "$(dirname "$0")/.."

export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"

# host[:port] of the URL: drop the scheme, the user info and the path.
authority="${DATABASE_URL#*://}"
authority="${authority##*@}"
authority="${authority%%/*}"
authority="${authority%%\?*}"
host="${authority%%:*}"
port=5432
[[ "$authority" == *:* ]] && port="${authority##*:}"
if ! (exec 3<>"/dev/tcp/${host:-127.0.0.1}/${port}") 2>/dev/null; then
    echo "error: no PostgreSQL answers at ${host}:${port} (DATABASE_URL=${DATABASE_URL})." >&2
    echo "       The tests need one: start it, or point DATABASE_URL at one." >&2
    exit 1
fi

# The alert rules of docs/alerts.yml, checked and unit-tested with promtool (Debian's
# `prometheus` package, installed when missing).
if ! command -v promtool >/dev/null; then
    echo "installing promtool (Debian package prometheus) for the alert-rule tests" >&2
    if ! { apt-get install -y -q --no-install-recommends prometheus >/dev/null ||
        { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends prometheus >/dev/null; }; }; then
        echo "error: promtool is missing and could not be installed: run apt-get install prometheus" >&2
        exit 1
    fi
fi
(cd docs && promtool check rules alerts.yml && promtool test rules alerts_test.yml)

# The console's browser tests drive headless Chromium through chromedriver (Debian's
# `chromium` and `chromium-driver`), installed when missing; they never skip.
if ! command -v chromedriver >/dev/null || ! { command -v chromium >/dev/null || command -v chromium-browser >/dev/null; }; then
    echo "installing chromium and chromium-driver for the console's browser tests" >&2
    if ! { apt-get install -y -q --no-install-recommends chromium chromium-driver >/dev/null ||
        { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends chromium chromium-driver >/dev/null; }; }; then
        echo "error: chromium or chromedriver is missing and could not be installed: run apt-get install chromium chromium-driver" >&2
        exit 1
    fi
fi

# The Kafka adapter's tests run against tansu, a Kafka-protocol broker built from crates.io
# (about 10 minutes the first time; kept in ~/.cargo/bin after that) and started here with
# in-memory storage, unless a broker already answers at $KAFKA_BROKERS.
export KAFKA_BROKERS="${KAFKA_BROKERS:-127.0.0.1:9092}"
if ! (exec 3<>"/dev/tcp/${KAFKA_BROKERS%%:*}/${KAFKA_BROKERS##*:}") 2>/dev/null; then
    if ! command -v tansu >/dev/null; then
        echo "installing tansu 0.6.0 (a Kafka-protocol broker) for the Kafka adapter's tests" >&2
        cargo install tansu --version 0.6.0 --features dynostore --locked --quiet
    fi
    mkdir -p target
    tansu broker --listener-url "tcp://${KAFKA_BROKERS}" --advertised-listener-url "tcp://${KAFKA_BROKERS}" \
        --storage-engine memory://tansu/ >target/tansu.log 2>&1 &
    tansu_pid=$!
    trap 'kill "$tansu_pid" 2>/dev/null || true' EXIT
    for _ in $(seq 1 100); do
        (exec 3<>"/dev/tcp/${KAFKA_BROKERS%%:*}/${KAFKA_BROKERS##*:}") 2>/dev/null && break
        kill -0 "$tansu_pid" 2>/dev/null || { cat target/tansu.log >&2; echo "error: tansu did not start" >&2; exit 1; }
        sleep 0.1
    done
fi

cargo test --workspace --locked "$@"

# A store written outside the workspace from dlq-core's docs alone, as a third party would:
# the conformance kit, the admin layer and the console on it. It shares the workspace's
# target directory, so dlq-core, dlq-web and their dependencies are built once.
CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}" \
    cargo test --manifest-path tests/third_party_store/Cargo.toml --locked

# Replaying old events after a deploy, as an application does it (outside the workspace, three
# binaries of one service sharing a SQLite file): version 1 and version 2 park events, version 3
# upcasts and drains them all.
CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}" \
    cargo test --manifest-path tests/redeploy/Cargo.toml --locked
