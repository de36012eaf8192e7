#!/usr/bin/env bash
# One server on PostgreSQL and several 10 s loads of unsigned single sends (`wrk -t2 -c32`), with
# SQL run on its database between them: for upper bounds of a schema change (a trigger disabled,
# an index re-keyed) before anyone writes it. Each load prints its emails/s (counted end to end,
# as pair.sh does) and the CPU an email of the server and of PostgreSQL, and the server's context
# switches an email. An argument of `-` runs nothing before its load.
# Usage: host/benches/http/between.sh HERALD_BIN SQL|- [SQL|- ...]
# e.g.   host/benches/http/between.sh target/release/herald - - "ALTER TABLE emails DISABLE TRIGGER USER" - -
# Needs what pair.sh needs. Compare loads of one run with each other: the tables grow from one to
# the next, so run a `-` after the change as well as before it.
set -euo pipefail
export PGOPTIONS='-c client_min_messages=warning'
cd "$(dirname "$0")/../../.."
BIN=$1; shift
DB=herald_between
source host/benches/http/common.sh
python3 "$HERE/dnsd.py" $DNS_PORT & DNSD=$!
smtp-sink -u "$(id -un)" 127.0.0.1:$SMTP_PORT 1024 & SINK=$!
WORK=$(mktemp -d) SERVER=
trap 'kill $SERVER $DNSD $SINK 2>/dev/null || true; rm -rf "$WORK"; psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS $DB" postgres' EXIT
psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS $DB" postgres
psql -h 127.0.0.1 -U postgres -qc "CREATE DATABASE $DB" postgres
url=postgres://postgres@127.0.0.1:5432/$DB
# The server's context switches so far (its threads' voluntary and involuntary ones).
switches() { cat /proc/$SERVER/task/*/status | awk '/^voluntary_ctxt/{v+=$2} /^nonvoluntary_ctxt/{n+=$2} END{print v+n}'; }
serve "$BIN" "$url" "$WORK"
wrk -t2 -c32 -d3s -s "$HERE/track.lua" http://127.0.0.1:$PORT >/dev/null
wrk -t2 -c32 -d3s -s "$HERE/send.lua" http://127.0.0.1:$PORT >/dev/null
drain
psql "$url" -qc ANALYZE
for sql in "$@"; do
  [ "$sql" != "-" ] && psql "$url" -qc "$sql"
  before=$(sent) cpu0=$(awk '{print $14+$15}' /proc/$SERVER/stat) pg0=$(pg_ticks) sw0=$(switches)
  start=$(date +%s.%N)
  wrk -t2 -c32 -d10s -s "$HERE/send.lua" http://127.0.0.1:$PORT >/dev/null
  drain
  end=$(date +%s.%N)
  after=$(sent) cpu1=$(awk '{print $14+$15}' /proc/$SERVER/stat) pg1=$(pg_ticks) sw1=$(switches)
  python3 - "$before" "$after" "$start" "$end" "$cpu0" "$cpu1" "$pg0" "$pg1" "$sw0" "$sw1" "$sql" <<'PY'
import sys
before, after, start, end, cpu0, cpu1, pg0, pg1, sw0, sw1 = map(float, sys.argv[1:11])
n, t = after - before, end - start
if n <= 0:
    sys.exit(f"   nothing was sent after: {sys.argv[11]}")
print(f"   {n / t:.0f} emails/s; CPU an email: server {(cpu1 - cpu0) * 10 / n:.3f} ms, "
      f"PostgreSQL {(pg1 - pg0) * 10 / n:.3f} ms; server context switches an email "
      f"{(sw1 - sw0) / n:.1f}; after: {sys.argv[11][:70]}")
PY
done
