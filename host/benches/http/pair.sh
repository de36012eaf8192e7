#!/usr/bin/env bash
# Interleaved pairs of two release binaries on one load, for changes whose gain is smaller than
# this machine's spread between runs: each run starts its own server on a fresh database, warms
# it (3 s of /v1/track, 3 s of the load, delivered, then ANALYZE on PostgreSQL) and measures 10 s
# of `wrk -t2 -c32`; sends are counted end to end (sent through /activity/stats over the load and
# the drain). Beside each figure: the CPU the server took, and on PostgreSQL the CPU its processes
# took (the postmaster's children, live and exited), in cores and in milliseconds an email.
# Usage: host/benches/http/pair.sh BEFORE_BIN AFTER_BIN sqlite|postgres [send|track] [pairs, default 3]
# Needs what run.sh needs (wrk, python3, Postfix's smtp-sink, PostgreSQL on 127.0.0.1:5432).
set -euo pipefail
export PGOPTIONS='-c client_min_messages=warning'
cd "$(dirname "$0")/../../.."
BEFORE=$1 AFTER=$2 DB=$3 LOAD=${4:-send} PAIRS=${5:-3}
source host/benches/http/common.sh
python3 "$HERE/dnsd.py" $DNS_PORT & DNSD=$!
smtp-sink -u "$(id -un)" 127.0.0.1:$SMTP_PORT 1024 & SINK=$!
SERVER= WORK=
trap 'kill $SERVER $DNSD $SINK 2>/dev/null || true; [ -n "$WORK" ] && rm -rf "$WORK"' EXIT

one_run() {
  local bin=$1 url
  WORK=$(mktemp -d)
  case $DB in
    sqlite) url="sqlite://$WORK/bench.db" ;;
    postgres)
      psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS herald_pair" postgres
      psql -h 127.0.0.1 -U postgres -qc "CREATE DATABASE herald_pair" postgres
      url=postgres://postgres@127.0.0.1:5432/herald_pair ;;
  esac
  serve "$bin" "$url" "$WORK"
  wrk -t2 -c32 -d3s -s "$HERE/track.lua" http://127.0.0.1:$PORT >/dev/null
  if [ "$LOAD" = send ]; then
    wrk -t2 -c32 -d3s -s "$HERE/send.lua" http://127.0.0.1:$PORT >/dev/null
    drain
  fi
  [ "$DB" = postgres ] && psql "$url" -qc ANALYZE
  local before=0 cpu0 pg0 start
  [ "$LOAD" = send ] && before=$(sent)
  cpu0=$(awk '{print $14+$15}' /proc/$SERVER/stat); pg0=0; [ "$DB" = postgres ] && pg0=$(pg_ticks); start=$(date +%s.%N)
  local out
  out=$(wrk -t2 -c32 -d10s --latency -s "$HERE/$LOAD.lua" http://127.0.0.1:$PORT)
  [ "$LOAD" = send ] && drain
  local end cpu1 pg1 after=0
  end=$(date +%s.%N); cpu1=$(awk '{print $14+$15}' /proc/$SERVER/stat); pg1=0; [ "$DB" = postgres ] && pg1=$(pg_ticks)
  [ "$LOAD" = send ] && after=$(sent)
  python3 - "$out" "$before" "$after" "$start" "$end" "$cpu0" "$cpu1" "$LOAD" "$(basename "$bin")" "$pg0" "$pg1" <<'PY'
import re, sys
out, before, after, start, end, cpu0, cpu1, load, name, pg0, pg1 = sys.argv[1:]
rps = re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)
p99 = re.search(r"99%\s+(\S+)", out).group(1)
errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
t = float(end) - float(start)
line = f"   {name}: {float(rps):.0f} req/s, p99 {p99}"
if errors: line += f", {errors.group(1)} non-2xx"
if load == "send": line += f"; {int(after) - int(before)} sent in {t:.1f} s = {(int(after) - int(before)) / t:.0f} emails/s"
line += f"; server CPU {(int(cpu1) - int(cpu0)) / 100 / t:.2f} cores"
pg = int(pg1) - int(pg0)
if pg > 0: line += f", PostgreSQL {pg / 100 / t:.2f}"
if load == "send" and int(after) > int(before):
    n = int(after) - int(before)
    line += f" ({(int(cpu1) - int(cpu0)) * 10 / n:.2f}" + (f" + {pg * 10 / n:.2f}" if pg > 0 else "") + " ms an email)"
print(line)
PY
  kill $SERVER; wait $SERVER 2>/dev/null || true; SERVER=
  rm -rf "$WORK"; WORK=
  [ "$DB" = postgres ] && psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE herald_pair" postgres
  return 0
}

echo "### $LOAD on $DB: $PAIRS pairs, before ($BEFORE) then after ($AFTER)"
for i in $(seq 1 "$PAIRS"); do
  echo "-- pair $i"
  one_run "$BEFORE"
  one_run "$AFTER"
done
