#!/usr/bin/env bash
# Captures what this release sends to PostgreSQL to park, claim, settle and heartbeat, with the
# parameters it sends, as the fixtures the next release runs against its own schema
# (dlq-sqlx/tests/previous_release/, read by dlq-sqlx/tests/rolling_upgrade.rs).
#
# Run it when a release is cut, before raising RELEASE_FIRST_MIGRATION (docs/DESIGN.md,
# "Rolling upgrades"), on a machine whose PostgreSQL logs to $PG_LOG and runs nothing else:
#     bash scripts/release-statements.sh
# It runs the test `this_release_s_statements` with every statement logged (a setting of its
# connections, not of the server), then reads the statements and their parameters back from
# the server's log.
set -euo pipefail
cd "$(dirname "$0")/.."

export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
PG_LOG="${PG_LOG:-$(ls /var/log/postgresql/postgresql-*-main.log | head -1)}"
out=dlq-sqlx/tests/previous_release
[[ -r "$PG_LOG" ]] || { echo "error: cannot read the server log $PG_LOG: set PG_LOG" >&2; exit 1; }

start=$(stat -c %s "$PG_LOG")
sep='?'
[[ "$DATABASE_URL" == *\?* ]] && sep='&'
DATABASE_URL="${DATABASE_URL}${sep}options=-c%20log_statement%3Dall%20-c%20log_parameter_max_length%3D-1" \
    cargo test -p dlq-sqlx --test rolling_upgrade --locked -- --exact this_release_s_statements
sleep 1 # the server writes its log asynchronously
captured="$(mktemp)"
trap 'rm -f "$captured"' EXIT
tail -c +"$((start + 1))" "$PG_LOG" >"$captured"

python3 - "$captured" "$out" <<'EOF'
"""Turns the log's `execute` entries into one PREPARE and EXECUTE per statement."""
import re
import sys
from pathlib import Path

log, out = Path(sys.argv[1]).read_text(), Path(sys.argv[2])
# An entry starts with the log line prefix `%m [%p] %q%u@%d `: a timestamp.
entries = re.split(r"\n(?=\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", log)
# The statement files each fixture comes from, told apart by their first comment line.
names = {
    "-- Registers or refreshes a running retrier": "heartbeat",
    "-- Parks a batch of letters in one statement": "park",
    "-- Claims up to": "claim",
    "-- The common outcome on its own": "succeed",
    "-- Writes a batch of outcomes in one statement": "settle",
    "-- A batch's outcomes written and the next batch claimed": "settle_claim",
}
statements = []
for i, entry in enumerate(entries):
    m = re.search(r" LOG:  execute [^:]*: (.*)", entry, re.S)
    if not m:
        continue
    sql = "\n".join(line[1:] if line.startswith("\t") else line for line in m.group(1).split("\n")).strip()
    name = next((n for head, n in names.items() if sql.startswith(head)), None)
    if name is None:
        continue
    params = ""
    if i + 1 < len(entries) and " DETAIL:  parameters: " in entries[i + 1]:
        detail = entries[i + 1].split(" DETAIL:  parameters: ", 1)[1]
        detail = "\n".join(line[1:] if line.startswith("\t") else line for line in detail.split("\n")).strip()
        # `$1 = '...', $2 = NULL`: quoted literals ('' inside), or NULL.
        values = re.findall(r"\$\d+ = ('(?:[^']|'')*'|NULL)", detail)
        params = ", ".join(values)
    statements.append((name, sql, params))

seen = {}
for name, sql, params in statements:
    # The first park is park_many's batch; the second the group commit's single letter.
    if name == "park":
        name = "park_many" if "park_many" not in seen else "park"
    if name in seen:
        continue
    seen[name] = True
    stmt = f"previous_{name}"
    text = [
        f"-- The previous release's {name}: captured by scripts/release-statements.sh from what it",
        "-- sent to the server; prepared for schema `dlq` and run with the parameters it sent.",
    ]
    if name in ("succeed", "settle", "settle_claim"):
        ids, tokens = re.findall(r"'(?:[^']|'')*'|NULL", params)[:2]
        text += [
            "-- The claimed rows hold the lease tokens they held at capture (a claim draws new ones).",
            f"UPDATE dlq.dlq_events AS e SET lease_token = t.token FROM unnest({ids}::int8[], {tokens}::uuid[]) AS t(id, token) WHERE e.id = t.id;",
        ]
    text += [f"PREPARE {stmt} AS", sql + ";", f"EXECUTE {stmt}({params});", ""]
    (out / f"{name}.sql").write_text("\n".join(text))
    print(f"{out}/{name}.sql")
missing = {"heartbeat", "park_many", "park", "claim", "succeed", "settle", "settle_claim"} - seen.keys()
if missing:
    sys.exit(f"error: not found in the log: {', '.join(sorted(missing))}")
EOF
