#!/usr/bin/env bash
# Open-pixel hits beside /v1/track (issue #74, item 8): one server on a fresh database, one email
# sent (its pixel read from the message smtp-sink dumped), then ROUNDS rounds (default 3) of two
# 10 s runs of /v1/track at a steady rate (track_paced.lua, `wrk -t2 -c4`, about 200 requests a
# second): one alone, one while pixel.lua makes 20,000 hits of that one email's pixel
# (`wrk -t2 -c24`, 10,000 a thread). Prints each run's /v1/track p99 and the ratio of the medians
# (the goal: within 1.20), and checks that the email's `opens` reach 1 + the hits made (later
# opens are counted in memory and written about every second; see the check at the end).
# Usage: host/benches/http/pixel.sh HERALD_BIN sqlite|postgres [rounds]
# Needs what pair.sh needs (wrk, python3, Postfix's smtp-sink, PostgreSQL on 127.0.0.1:5432).
set -euo pipefail
export PGOPTIONS='-c client_min_messages=warning'
cd "$(dirname "$0")/../../.."
BIN=$1 DB=$2 ROUNDS=${3:-3}
source host/benches/http/common.sh
WORK=$(mktemp -d) SERVER=
mkdir -p "$WORK/mail"
python3 "$HERE/dnsd.py" $DNS_PORT & DNSD=$!
smtp-sink -u "$(id -un)" -d "$WORK/mail/%H%M%S." 127.0.0.1:$SMTP_PORT 1024 & SINK=$!
trap 'kill $SERVER $DNSD $SINK 2>/dev/null || true; rm -rf "$WORK"; [ "$DB" = postgres ] && psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS herald_pixel" postgres || true' EXIT
case $DB in
  sqlite) url="sqlite://$WORK/bench.db" ;;
  postgres)
    psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS herald_pixel" postgres
    psql -h 127.0.0.1 -U postgres -qc "CREATE DATABASE herald_pixel" postgres
    url=postgres://postgres@127.0.0.1:5432/herald_pixel ;;
  *) echo "usage: $0 HERALD_BIN sqlite|postgres [rounds]" >&2; exit 2 ;;
esac
serve "$BIN" "$url" "$WORK"

# The email whose pixel is hit.
email=$(curl -sf http://127.0.0.1:$PORT/v1/send -H "Authorization: Bearer $HERALD_BENCH_KEY" \
  -H 'Content-Type: application/json' \
  -d "{\"to\":\"reader@example.com\",\"from\":\"$HERALD_BENCH_FROM\",\"subject\":\"News\",\"body\":\"<p>Hello <a href=\\\"https://shop.example/\\\">shop</a></p>\"}" \
  | python3 -c "import json,sys;print(json.load(sys.stdin)['data']['emails'][0]['email'])")
for _ in $(seq 1 100); do [ -n "$(ls "$WORK/mail")" ] && break; sleep 0.1; done
export HERALD_BENCH_PIXEL=$(python3 - "$WORK/mail" <<'PY'
import email, os, re, sys
d = sys.argv[1]
# smtp-sink's X- lines of the transaction come first, in header form: parsed with the headers.
raw = open(os.path.join(d, sorted(os.listdir(d))[0]), "rb").read()
for part in email.message_from_bytes(raw).walk():
    if part.get_content_type() == "text/html":
        html = part.get_payload(decode=True).decode()
        print(re.search(r'src="https?://[^/"]+(/t/o/[^"]+)"', html).group(1))
        break
PY
)
echo "### pixel hits beside /v1/track on $DB: email $email, pixel $HERALD_BENCH_PIXEL"
curl -sf -o /dev/null "http://127.0.0.1:$PORT$HERALD_BENCH_PIXEL"   # the first open, recorded at once
wrk -t2 -c32 -d3s -s "$HERE/track.lua" http://127.0.0.1:$PORT >/dev/null
[ "$DB" = postgres ] && psql "$url" -qc ANALYZE

p99() { python3 -c "
import re,sys
v, u = re.search(r'99%\s+([\d.]+)(us|ms|s)', sys.stdin.read()).groups()
print(float(v) * {'us': 0.001, 'ms': 1, 's': 1000}[u])"; }
track() { wrk -t2 -c4 -d10s --latency -s "$HERE/track_paced.lua" http://127.0.0.1:$PORT; }
hits=0 alone=() beside=()
for i in $(seq 1 "$ROUNDS"); do
  a=$(track | p99)
  wrk -t2 -c24 -d10s -s "$HERE/pixel.lua" http://127.0.0.1:$PORT > "$WORK/pixel.out" &
  PIXEL=$!
  b=$(track | p99)
  wait $PIXEL
  n=$(grep -Eo '^ +[0-9]+ requests' "$WORK/pixel.out" | grep -Eo '[0-9]+')
  hits=$((hits + n))
  echo "-- round $i: /v1/track p99 alone ${a} ms, beside $n pixel hits ${b} ms"
  alone+=("$a") beside+=("$b")
done
python3 - "${alone[*]}" "${beside[*]}" <<'PY'
import statistics, sys
a = statistics.median(float(x) for x in sys.argv[1].split())
b = statistics.median(float(x) for x in sys.argv[2].split())
print(f"median /v1/track p99: alone {a:.2f} ms, beside the hits {b:.2f} ms: x{b / a:.2f} ({'within' if b <= a * 1.2 else 'NOT within'} 20 %)")
PY
# wrk counts the responses it read: when a thread stops at its limit, the requests its other
# connections have in flight are still answered (and counted by the server), up to one per
# connection (24) a round. So the email's opens are 1 + the hits wrk counted, plus at most that.
low=$((hits + 1)) high=$((hits + 1 + 24 * ROUNDS)) got=0
for _ in $(seq 1 50); do
  got=$(api "/emails/$email" | python3 -c "import json,sys;print(json.load(sys.stdin)['opens'])")
  [ "$got" -ge "$low" ] && break
  sleep 0.2
done
sleep 1.5
got=$(api "/emails/$email" | python3 -c "import json,sys;print(json.load(sys.stdin)['opens'])")
echo "opens of the email: $got (1 + $hits hits wrk counted, at most $((24 * ROUNDS)) more in flight: $([ "$got" -ge "$low" ] && [ "$got" -le "$high" ] && echo right || echo WRONG))"
