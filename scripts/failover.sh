#!/usr/bin/env bash
# Failover of PostgreSQL under load: a primary and a streaming replica on this machine, clients
# through PgBouncer, the primary crashed and the replica promoted several times while parkers and
# retriers run (the driver, tests/bin/failover.rs, prints what every caller was answered against
# the rows of the last primary).
#
#   scripts/failover.sh [sync|async|both]     (both by default; about 90 s each)
#
# Sync: `synchronous_standby_names = 'dlq_standby'`, `synchronous_commit = on`; the driver fails
# on any `Parked` answer without its row, a row parked twice, a row stuck PROCESSING past its
# lease, a retry lost, or a parker or retrier that did not recover on its own. Async: the same
# counts, reported, not failed on. The two clusters (ports 5441 and 5442), PgBouncer (6441) and
# the data live under $CARGO_TARGET_DIR/failover (else target/failover) and are removed at exit;
# the logs stay in failover-logs beside it. Needs PostgreSQL 15's server binaries
# (/usr/lib/postgresql/15/bin, or $PG_BIN) and PgBouncer 1.21 or later ($PGBOUNCER, else
# target/pgbouncer-build/bin/pgbouncer, which scripts/test.sh builds). As root, the clusters and
# PgBouncer run as the user postgres (PostgreSQL refuses root).
set -euo pipefail
cd "$(dirname "$0")/.."

PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
target="${CARGO_TARGET_DIR:-$PWD/target}"
dir="$target/failover"
logs="$target/failover-logs"
ports=(5441 5442)
bouncer_port=6441
PGBOUNCER="${PGBOUNCER:-$PWD/target/pgbouncer-build/bin/pgbouncer}"

as_pg() {
    if [[ "$(id -u)" == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}
psql_at() {
    local port="$1"
    shift
    "$PG_BIN/psql" -X -q -A -t -h 127.0.0.1 -p "$port" -U postgres "$@"
}
other_port() { if [[ "$1" == "${ports[0]}" ]]; then echo "${ports[1]}"; else echo "${ports[0]}"; fi; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

start_node() {
    local port="$1"
    as_pg "$PG_BIN/pg_ctl" -D "$dir/n$port" -o "-p $port" -l "$logs/n$port.log" -w -t 60 start >/dev/null
}
stop_node() {
    [[ -f "$dir/n$1/postmaster.pid" ]] && as_pg "$PG_BIN/pg_ctl" -D "$dir/n$1" -m immediate -w stop >/dev/null 2>&1
    return 0
}

# Waits until a standby named dlq_standby streams from the primary at $1 (and, in sync mode,
# is its synchronous standby).
wait_standby() {
    local want="state = 'streaming'"
    [[ "$(cat "$dir/mode")" == sync ]] && want="$want AND sync_state = 'sync'"
    for _ in $(seq 1 600); do
        [[ "$(psql_at "$1" -d postgres -c "SELECT count(*) FROM pg_stat_replication WHERE application_name = 'dlq_standby' AND $want")" == 1 ]] &&
            return 0
        sleep 0.1
    done
    echo "error: no standby streams from the primary at port $1" >&2
    return 1
}

# Makes the node at $1 a fresh standby of the primary at $2 (pg_basebackup) and starts it.
rebuild_standby() {
    local port="$1" primary="$2"
    stop_node "$port"
    rm -rf "$dir/n$port"
    as_pg "$PG_BIN/pg_basebackup" -h 127.0.0.1 -p "$primary" -U postgres -D "$dir/n$port" -X stream -c fast --no-sync
    as_pg touch "$dir/n$port/standby.signal"
    echo "primary_conninfo = 'host=127.0.0.1 port=$primary user=postgres application_name=dlq_standby'" |
        as_pg tee -a "$dir/n$port/postgresql.auto.conf" >/dev/null
    start_node "$port"
    wait_standby "$primary"
}

# PgBouncer in front of the primary at $1: `dlq` in transaction mode (the stores' pools),
# `dlq_session` in session mode (their session URL: LISTEN, locks, migrations).
bouncer_config() {
    cat >"$dir/pgbouncer/pgbouncer.ini.new" <<EOF
[databases]
dlq = host=127.0.0.1 port=$1 dbname=dlq
dlq_session = host=127.0.0.1 port=$1 dbname=dlq pool_mode=session
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $bouncer_port
unix_socket_dir =
auth_type = trust
auth_file = $dir/pgbouncer/userlist.txt
admin_users = postgres
pool_mode = transaction
max_prepared_statements = 200
default_pool_size = 40
max_client_conn = 1000
server_login_retry = 0.2
server_connect_timeout = 2
query_wait_timeout = 10
ignore_startup_parameters = extra_float_digits,options,search_path
logfile = $logs/pgbouncer.log
EOF
    mv "$dir/pgbouncer/pgbouncer.ini.new" "$dir/pgbouncer/pgbouncer.ini"
}

# The failover the driver asks for: the primary crashes (immediate stop: no shutdown
# checkpoint, its walsender stops where it is), the standby is promoted, PgBouncer is pointed
# at it, and the old primary is rebuilt as the new standby (so that the next failover can come).
promote() {
    local old new start
    old="$(cat "$dir/primary")"
    new="$(other_port "$old")"
    start="$(now)"
    stop_node "$old"
    as_pg "$PG_BIN/pg_ctl" -D "$dir/n$new" -w -t 60 promote >/dev/null
    echo "$new" >"$dir/primary"
    bouncer_config "$new"
    psql_at "$bouncer_port" -d pgbouncer -c RELOAD -c RECONNECT >/dev/null
    echo "failover: primary $old crashed, $new promoted, PgBouncer switched in $(since "$start") s"
    rebuild_standby "$old" "$new" >>"$logs/basebackup.log" 2>&1
    echo "failover: $old rebuilt as the standby of $new in $(since "$start") s"
}

cleanup() {
    if [[ -f "$dir/pgbouncer/pgbouncer.pid" ]]; then
        kill "$(cat "$dir/pgbouncer/pgbouncer.pid")" 2>/dev/null || true
    fi
    for port in "${ports[@]}"; do stop_node "$port"; done
    rm -rf "$dir"
}

# One run: fresh clusters in `mode` (sync or async), PgBouncer, the driver.
run() {
    local mode="$1"
    cleanup
    mkdir -p "$dir/pgbouncer" "$logs"
    echo async >"$dir/mode"
    : >"$logs/basebackup.log"
    if [[ "$(id -u)" == 0 ]]; then
        chown -R postgres "$dir" "$logs"
        chmod a+rx "$target"
    fi
    local primary="${ports[0]}"
    as_pg "$PG_BIN/initdb" -D "$dir/n$primary" -U postgres --auth=trust >"$logs/initdb.log"
    local sync_names="''"
    [[ "$mode" == sync ]] && sync_names="'dlq_standby'"
    as_pg tee -a "$dir/n$primary/postgresql.conf" >/dev/null <<EOF
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir'
wal_level = replica
max_wal_senders = 10
wal_keep_size = '1GB'
hot_standby = on
shared_buffers = '64MB'
max_connections = 200
synchronous_commit = on
EOF
    start_node "$primary"
    echo "$primary" >"$dir/primary"
    psql_at "$primary" -d postgres -c "CREATE DATABASE dlq" -c "CREATE ROLE dlq_app LOGIN"
    # Synchronous once the standby streams (until then commits would wait for it).
    echo "synchronous_standby_names = $sync_names" | as_pg tee -a "$dir/n$primary/postgresql.conf" >/dev/null
    rebuild_standby "$(other_port "$primary")" "$primary" >>"$logs/basebackup.log" 2>&1
    psql_at "$primary" -d postgres -c "SELECT pg_reload_conf()" >/dev/null
    echo "$mode" >"$dir/mode"
    wait_standby "$primary"
    printf '"postgres" ""\n"dlq_app" ""\n' >"$dir/pgbouncer/userlist.txt"
    bouncer_config "$primary"
    # PgBouncer refuses to run as root: as root, it switches to postgres itself.
    local run_as=()
    [[ "$(id -u)" == 0 ]] && run_as=(-u postgres)
    "$PGBOUNCER" ${run_as[@]+"${run_as[@]}"} "$dir/pgbouncer/pgbouncer.ini" >/dev/null 2>&1 &
    echo $! >"$dir/pgbouncer/pgbouncer.pid"
    for _ in $(seq 1 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$bouncer_port") 2>/dev/null && break
        sleep 0.1
    done
    echo "== $mode replication: primary ${ports[0]}, standby ${ports[1]}, PgBouncer $bouncer_port"
    "$target/debug/dlq-failover" --mode "$mode" \
        --url "postgres://postgres@127.0.0.1:$bouncer_port/dlq" \
        --session-url "postgres://postgres@127.0.0.1:$bouncer_port/dlq_session" \
        --failover "bash scripts/failover.sh promote" \
        --seconds "${FAILOVER_SECONDS:-64}" --failovers "${FAILOVER_COUNT:-4}"
}

what="${1:-both}"
case "$what" in
promote) promote ;;
sync | async | both)
    if [[ ! -x "$PGBOUNCER" ]]; then
        echo "error: no PgBouncer at $PGBOUNCER: set PGBOUNCER to a PgBouncer 1.21 or later (scripts/test.sh builds one)" >&2
        exit 1
    fi
    export CARGO_TARGET_DIR="$target"
    cargo build --locked -p dlq-tests --bin dlq-failover
    trap cleanup EXIT
    status=0
    modes=("$what")
    [[ "$what" == both ]] && modes=(sync async)
    for mode in "${modes[@]}"; do
        run "$mode" || status=1
    done
    exit "$status"
    ;;
*)
    echo "usage: scripts/failover.sh [sync|async|both]" >&2
    exit 2
    ;;
esac
