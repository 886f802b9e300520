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

cargo test --workspace --locked "$@"
