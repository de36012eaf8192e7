#!/usr/bin/env bash
# HTTP benchmarks of the contacts API and /v1/verify with wrk, on SQLite and (if reachable)
# PostgreSQL.
# Usage: host/benches/http/run.sh [duration, default 20s]
#        ONLY=verify host/benches/http/run.sh 15s    # one section: contacts or verify
# Needs: wrk (apt-get install wrk), python3, a release build (cargo build --release),
# PostgreSQL on 127.0.0.1:5432 for the second half. The server and wrk share the machine's
# cores. /v1/verify asks a loopback DNS server (dnsd.py, started here), never the network's.
set -euo pipefail
cd "$(dirname "$0")/../../.."
DURATION=${1:-20s}
BIN=${CARGO_TARGET_DIR:-target}/release/herald
HERE=host/benches/http
[ -x "$BIN" ] || cargo build --release
PORT=18181
DNS_PORT=18153
WORK=$(mktemp -d)
python3 "$HERE/dnsd.py" $DNS_PORT &
DNSD=$!
trap 'kill $SERVER $DNSD 2>/dev/null || true; rm -rf "$WORK"' EXIT
want() { [ -z "${ONLY:-}" ] || [ "$ONLY" = "$1" ]; }

bench_backend() {
  local name=$1 url=$2
  echo "### $name"
  "$BIN" init --json --database-url "$url" --data-dir "$WORK" > "$WORK/init.json"
  export HERALD_BENCH_KEY=$(python3 -c "import json;print(json.load(open('$WORK/init.json'))['secretKey'])")
  export HERALD_BENCH_PUBLIC_KEY=$(python3 -c "import json;print(json.load(open('$WORK/init.json'))['publicKey'])")
  HERALD_RATE_LIMIT_PER_MINUTE=100000000 HERALD_LOG=warn \
    HERALD_PLUGINS__DNS_NAMESERVERS="[\"127.0.0.1:$DNS_PORT\"]" "$BIN" serve --listen 127.0.0.1:$PORT \
    --database-url "$url" --data-dir "$WORK" &
  SERVER=$!
  for _ in $(seq 1 50); do curl -sf http://127.0.0.1:$PORT/ready >/dev/null && break; sleep 0.1; done
  if want verify; then
  echo "-- POST /v1/verify (secret key; 100 addresses on 96 domains, DNS cache warm)"
  curl -sf "http://127.0.0.1:$PORT/v1/verify" -H "Authorization: Bearer $HERALD_BENCH_KEY" \
    -H 'Content-Type: application/json' -d '{"email":"ann+x@company-1.example"}' \
    | python3 -c "import json,sys;d=json.load(sys.stdin)['data'];assert d['valid'] and d['hasMxRecords'], d"
  # A short first run fills the DNS cache (and warms the server); only the second one counts.
  wrk -t2 -c32 -d3s -s "$HERE/verify.lua" http://127.0.0.1:$PORT >/dev/null
  wrk -t2 -c32 -d"$DURATION" --latency -s "$HERE/verify.lua" http://127.0.0.1:$PORT | grep -E "Requests/sec|Latency|50%|99%|requests in|Non-2xx"
  fi
  if want contacts; then
  echo "-- POST /v1/track (public key; event per request, a contact per 10 events)"
  wrk -t2 -c32 -d"$DURATION" --latency -s "$HERE/track.lua" http://127.0.0.1:$PORT | grep -E "Requests/sec|Latency|50%|99%|requests in|Non-2xx"
  echo "-- CSV import of 100,000 rows"
  python3 - "$WORK/import.csv" <<'PY'
import sys
with open(sys.argv[1], "w") as f:
    f.write("email,first_name,plan,seats,signup\n")
    for i in range(100_000):
        f.write(f"imp-{i}@example.com,Person{i},pro,{i % 50},2024-05-01\n")
PY
  ls -la "$WORK/import.csv" | awk '{print "   file bytes:", $5}'
  START=$(date +%s.%N)
  JOB=$(curl -sf "http://127.0.0.1:$PORT/contacts/import" -H "Authorization: Bearer $HERALD_BENCH_KEY" -F "file=@$WORK/import.csv;type=text/csv" | python3 -c "import json,sys;print(json.load(sys.stdin)['jobId'])")
  while :; do
    STATE=$(curl -sf "http://127.0.0.1:$PORT/contacts/import/$JOB" -H "Authorization: Bearer $HERALD_BENCH_KEY" | python3 -c "import json,sys;d=json.load(sys.stdin);print(d['state'], d['result']['succeeded'] if d['result'] else 0)")
    case "$STATE" in completed*|failed*) break;; esac
    sleep 0.1
  done
  END=$(date +%s.%N)
  echo "   import: $STATE in $(python3 -c "print(round($END-$START, 2))") s (upload to completed)"
  echo "-- POST /contacts (new contact per request)"
  wrk -t2 -c32 -d"$DURATION" --latency -s "$HERE/post_contacts.lua" http://127.0.0.1:$PORT | grep -E "Requests/sec|Latency|50%|99%|requests in|Non-2xx"
  echo "-- GET /contacts (first page, with total)"
  wrk -t2 -c32 -d"$DURATION" --latency -s "$HERE/get_contacts.lua" http://127.0.0.1:$PORT/contacts | grep -E "Requests/sec|Latency|50%|99%|requests in|Non-2xx"
  fi
  kill $SERVER; wait $SERVER 2>/dev/null || true
}

bench_backend sqlite "sqlite://$WORK/bench.db"
if pg_isready -h 127.0.0.1 -p 5432 -q; then
  DB="herald_bench_$$"
  psql -h 127.0.0.1 -U postgres -qc "CREATE DATABASE $DB"
  bench_backend postgres "postgres://postgres@127.0.0.1:5432/$DB"
  psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE $DB WITH (FORCE)"
else
  echo "PostgreSQL not reachable; skipped its half"
fi
