#!/usr/bin/env bash
# Runs every test of the workspace, PostgreSQL tests included.
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

cargo test --workspace --locked "$@"
