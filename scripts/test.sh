#!/usr/bin/env bash
# Runs every test of the workspace, PostgreSQL and headless-browser tests included.
#
# Uses $DATABASE_URL when set, otherwise PostgreSQL at 127.0.0.1:5432 as user postgres.
# Fails with a clear message (it does not skip) when no PostgreSQL answers there.
set -euo pipefail
cd "$(dirname "$0")/.."

export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"

# Sets host and port from a postgres:// URL: drop the scheme, the user info and the path.
host_port() {
    local authority="${1#*://}"
    authority="${authority##*@}"
    authority="${authority%%/*}"
    authority="${authority%%\?*}"
    host="${authority%%:*}"
    host="${host:-127.0.0.1}"
    port=5432
    if [[ "$authority" == *:* ]]; then port="${authority##*:}"; fi
}
answers() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# Processes started here (tansu, PgBouncer), stopped at exit.
started=()
trap 'for pid in ${started[@]+"${started[@]}"}; do kill "$pid" 2>/dev/null || true; done' EXIT

host_port "$DATABASE_URL"
if ! answers "$host" "$port"; then
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
    started+=("$tansu_pid")
    for _ in $(seq 1 100); do
        (exec 3<>"/dev/tcp/${KAFKA_BROKERS%%:*}/${KAFKA_BROKERS##*:}") 2>/dev/null && break
        kill -0 "$tansu_pid" 2>/dev/null || { cat target/tansu.log >&2; echo "error: tansu did not start" >&2; exit 1; }
        sleep 0.1
    done
fi

# PgStore through PgBouncer in transaction mode (dlq-sqlx/tests/pgbouncer.rs), started here
# in front of DATABASE_URL's server unless one answers at $DLQ_PGBOUNCER_URL already. It must be
# PgBouncer 1.21 or later (max_prepared_statements keeps sqlx's prepared statements across
# server connections). $PGBOUNCER names the binary, else `pgbouncer` on the PATH (Debian's
# package, installed when missing). Debian 12 ships 1.18: then the source package of Debian 13
# is fetched from Debian's archive and built under target/pgbouncer-build (once; it is kept).
export DLQ_PGBOUNCER_URL="${DLQ_PGBOUNCER_URL:-postgres://postgres@127.0.0.1:6432/postgres}"
pg_host="$host" pg_port="$port"

# The version of the PgBouncer binary $1 as "major minor".
pgbouncer_version() {
    local version
    version="$("$1" --version | head -1)"
    version="${version#PgBouncer }"
    IFS=. read -r major minor _ <<<"$version"
    echo "${major:-0} ${minor:-0}"
}
new_enough() {
    local major minor
    read -r major minor <<<"$(pgbouncer_version "$1")"
    ((major > 1 || (major == 1 && minor >= 21)))
}
# Builds PgBouncer from Debian 13's source package into target/pgbouncer-build.
build_pgbouncer() {
    local dir="$PWD/target/pgbouncer-build"
    [[ -x "$dir/bin/pgbouncer" ]] && return 0
    echo "building PgBouncer from Debian 13's source package (Debian 12's 1.18 is too old for transaction mode)" >&2
    rm -rf "$dir/src" && mkdir -p "$dir/src"
    echo 'deb-src http://deb.debian.org/debian trixie main' >"$dir/trixie-src.list"
    local apt_src=(-o Dir::Etc::sourcelist="$dir/trixie-src.list" -o Dir::Etc::sourceparts=- -o APT::Get::List-Cleanup=0)
    apt-get update -q "${apt_src[@]}" >/dev/null &&
        (cd "$dir/src" && apt-get source --download-only -q "${apt_src[@]}" pgbouncer >/dev/null) &&
        apt-get install -y -q --no-install-recommends gcc make pkg-config libevent-dev libssl-dev >/dev/null &&
        tar xzf "$dir"/src/pgbouncer_*.orig.tar.gz -C "$dir/src" &&
        (cd "$dir"/src/pgbouncer-*/ && ./configure -q --prefix="$dir" --without-cares --without-pam >/dev/null &&
            make -j2 >/dev/null && make install >/dev/null)
}
host_port "$DLQ_PGBOUNCER_URL"
if ! answers "$host" "$port"; then
    PGBOUNCER="${PGBOUNCER:-$(command -v pgbouncer || echo /usr/sbin/pgbouncer)}"
    if [[ ! -x "$PGBOUNCER" ]]; then
        echo "installing pgbouncer (Debian package pgbouncer) for the PgBouncer tests" >&2
        if ! { apt-get install -y -q --no-install-recommends pgbouncer >/dev/null ||
            { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends pgbouncer >/dev/null; }; }; then
            echo "error: pgbouncer is missing and could not be installed: run apt-get install pgbouncer" >&2
            exit 1
        fi
        PGBOUNCER=/usr/sbin/pgbouncer
    fi
    if ! new_enough "$PGBOUNCER"; then
        if ! build_pgbouncer; then
            echo "error: $PGBOUNCER is PgBouncer $(pgbouncer_version "$PGBOUNCER" | tr ' ' .), and building 1.21 or later from" >&2
            echo "       Debian 13's source failed: set PGBOUNCER=/path/to/pgbouncer (1.21 or later), or point" >&2
            echo "       DLQ_PGBOUNCER_URL at one in transaction mode." >&2
            exit 1
        fi
        PGBOUNCER="$PWD/target/pgbouncer-build/bin/pgbouncer"
    fi
    # Any database of DATABASE_URL's server, as DATABASE_URL's user (its password, if any, from
    # the auth file), in transaction mode, keeping prepared statements; idle server connections
    # close after a second, so that a test's database can be dropped soon after the test.
    mkdir -p target/pgbouncer
    userinfo="${DATABASE_URL#*://}"
    if [[ "$userinfo" == *@* ]]; then userinfo="${userinfo%%@*}"; else userinfo=postgres; fi
    user="${userinfo%%:*}" password=""
    if [[ "$userinfo" == *:* ]]; then password="${userinfo#*:}"; fi
    printf '"%s" "%s"\n' "$user" "$password" >target/pgbouncer/userlist.txt
    cat >target/pgbouncer/pgbouncer.ini <<EOF
[databases]
* = host=${pg_host} port=${pg_port}
[pgbouncer]
listen_addr = ${host}
listen_port = ${port}
unix_socket_dir =
auth_type = trust
auth_file = ${PWD}/target/pgbouncer/userlist.txt
admin_users = ${user}
pool_mode = transaction
max_prepared_statements = 200
default_pool_size = 20
max_client_conn = 1000
server_idle_timeout = 1
ignore_startup_parameters = extra_float_digits,options,search_path
EOF
    # PgBouncer refuses to run as root: as root, it runs as nobody, which must read the files.
    run_as=()
    if [[ "$(id -u)" == 0 ]]; then
        run_as=(-u nobody)
        chmod a+rx target target/pgbouncer
    fi
    "$PGBOUNCER" ${run_as[@]+"${run_as[@]}"} target/pgbouncer/pgbouncer.ini >target/pgbouncer/pgbouncer.log 2>&1 &
    echo $! >target/pgbouncer/pgbouncer.pid
    started+=("$!")
    for _ in $(seq 1 100); do
        answers "$host" "$port" && break
        kill -0 "$(cat target/pgbouncer/pgbouncer.pid)" 2>/dev/null ||
            { cat target/pgbouncer/pgbouncer.log >&2; echo "error: PgBouncer did not start" >&2; exit 1; }
        sleep 0.1
    done
    answers "$host" "$port" || { echo "error: PgBouncer does not answer at ${host}:${port}" >&2; exit 1; }
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

# Failover under load (scripts/failover.sh): a primary and a streaming replica, the primary
# crashed and the replica promoted four times in a minute of parks and retries, once with
# synchronous replication (fails on any `Parked` answer without its row) and once with
# asynchronous (reports what it lost); about three minutes. It uses the PgBouncer found or
# built above.
PGBOUNCER="${PGBOUNCER:-$PWD/target/pgbouncer-build/bin/pgbouncer}" bash scripts/failover.sh
