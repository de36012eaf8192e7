#!/usr/bin/env bash
# HTTP benchmarks of the contacts API and /v1/verify with wrk, on SQLite and (if reachable)
# PostgreSQL.
# Usage: host/benches/http/run.sh [duration, default 20s]   (HERALD_BIN=… runs another binary)
#        ONLY=verify host/benches/http/run.sh 15s    # one section: contacts, verify, send, million or attachments
#        DEFAULTS=1 ONLY=send host/benches/http/run.sh  # the queue and SMTP pool at their defaults
#        BACKEND=postgres ONLY=send host/benches/http/run.sh  # one database: sqlite or postgres
# Needs: wrk (apt-get install wrk), python3, a release build (cargo build --release),
# PostgreSQL on 127.0.0.1:5432 for the second half. The server and wrk share the machine's
# cores. /v1/verify asks a loopback DNS server (dnsd.py, started here), never the network's.
# /v1/send delivers into Postfix's smtp-sink on loopback (apt-get install postfix).
set -euo pipefail
cd "$(dirname "$0")/../../.."
DURATION=${1:-20s}
BIN=${HERALD_BIN:-${CARGO_TARGET_DIR:-target}/release/herald}
HERE=host/benches/http
[ -x "$BIN" ] || cargo build --release
PORT=18181
DNS_PORT=18153
WORK=$(mktemp -d)
SMTP_PORT=18125
python3 "$HERE/dnsd.py" $DNS_PORT &
DNSD=$!
SINK=
if command -v smtp-sink >/dev/null; then
  smtp-sink -u "$(id -un)" 127.0.0.1:$SMTP_PORT 1024 &
  SINK=$!
fi
trap 'kill $SERVER $DNSD $SINK 2>/dev/null || true; rm -rf "$WORK"' EXIT
want() { [ -z "${ONLY:-}" ] || [ "$ONLY" = "$1" ]; }
# Waits until the project has no queued email left (all handed to the transport).
wait_drained() {
  while :; do
    Q=$(curl -sf "http://127.0.0.1:$PORT/activity/upcoming" -H "Authorization: Bearer $HERALD_BENCH_KEY" | python3 -c "import json,sys;print(json.load(sys.stdin)['queuedEmails'])")
    [ "$Q" = 0 ] && break
    sleep 0.2
  done
}

bench_backend() {
  local name=$1 url=$2
  echo "### $name"
  "$BIN" init --json --database-url "$url" --data-dir "$WORK" > "$WORK/init.json"
  export HERALD_BENCH_KEY=$(python3 -c "import json;print(json.load(open('$WORK/init.json'))['secretKey'])")
  export HERALD_BENCH_PUBLIC_KEY=$(python3 -c "import json;print(json.load(open('$WORK/init.json'))['publicKey'])")
  # Sending: the smtp transport into smtp-sink; domains that are not verified may send (unsigned)
  # so that one run measures sending without DKIM. With DEFAULTS=1 the queue and the SMTP pool
  # keep their defaults (4 job workers, 4 connections, batches of 50), else 32 workers and 16
  # connections.
  TUNED="HERALD_JOBS_CONCURRENCY=32 HERALD_PLUGINS__SMTP_POOL_SIZE=16 HERALD_JOBS_POLL_INTERVAL_MS=20"
  [ -n "${DEFAULTS:-}" ] && TUNED=
  env $TUNED HERALD_RATE_LIMIT_PER_MINUTE=100000000 HERALD_LOG=warn \
    HERALD_PLUGINS__DNS_NAMESERVERS="[\"127.0.0.1:$DNS_PORT\"]" \
    HERALD_PLUGINS__TRANSPORT=smtp HERALD_PLUGINS__SMTP_HOST=127.0.0.1 HERALD_PLUGINS__SMTP_PORT=$SMTP_PORT \
    HERALD_PLUGINS__SMTP_TLS=none HERALD_DOMAINS__ALLOW_UNVERIFIED=true \
    "$BIN" serve --listen 127.0.0.1:$PORT --database-url "$url" --data-dir "$WORK" &
  SERVER=$!
  for _ in $(seq 1 50); do curl -sf http://127.0.0.1:$PORT/ready >/dev/null && break; sleep 0.1; done
  # A deployment that has been running has rows and, on PostgreSQL, statistics: 3 s of the track
  # load, then ANALYZE (WARM=0 skips both). Without it, PostgreSQL keeps the plans it made for the
  # server's prepared statements while the tables were empty until an ANALYZE replaces them, which
  # autovacuum does in a default PostgreSQL but not on this machine's (autovacuum = off).
  if [ "${WARM:-1}" != 0 ]; then
    wrk -t2 -c32 -d3s -s "$HERE/track.lua" http://127.0.0.1:$PORT >/dev/null
    case "$url" in postgres*) psql "$url" -qc ANALYZE ;; esac
  fi
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
  curl -sf "http://127.0.0.1:$PORT/contacts?limit=1" -H "Authorization: Bearer $HERALD_BENCH_KEY" \
    | python3 -c "import json,sys;print('   contacts before the run:', json.load(sys.stdin)['total'])"
  wrk -t2 -c32 -d"$DURATION" --latency -s "$HERE/track.lua" http://127.0.0.1:$PORT | grep -E "Requests/sec|Latency|50%|99%|requests in|Non-2xx"
  # Count what was written: the contacts the run created (one per 10 requests per thread).
  curl -sf "http://127.0.0.1:$PORT/contacts?limit=1" -H "Authorization: Bearer $HERALD_BENCH_KEY" \
    | python3 -c "import json,sys;print('   contacts after the run:', json.load(sys.stdin)['total'])"
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
  if want send && [ -n "$SINK" ]; then
  # A verified domain for the signed run: added through the API (which makes its RSA-2048 key),
  # then marked verified in the database, since the benchmark's DNS does not publish its records.
  curl -sf "http://127.0.0.1:$PORT/domains" -H "Authorization: Bearer $HERALD_BENCH_KEY" \
    -H 'Content-Type: application/json' -d '{"domain":"dkim-bench.test"}' >/dev/null
  sleep 1 # let the first background check (which finds no records here) pass
  case "$url" in
    sqlite*) python3 -c "import sqlite3,sys;c=sqlite3.connect(sys.argv[1]);c.execute(\"UPDATE domains SET status='verified'\");c.commit()" "$WORK/bench.db";;
    *) psql "$url" -qc "UPDATE domains SET status='verified'";;
  esac
  # The ceilings, measured here in the same run: Postfix's own client into the same sink (the
  # transport's ceiling), and OpenSSL's RSA-2048 signing on one core (the signing ceiling).
  START=$(date +%s.%N)
  smtp-source -s 16 -m 20000 -l 4000 -f bench@plain-bench.example -t sink@example.com 127.0.0.1:$SMTP_PORT
  END=$(date +%s.%N)
  python3 -c "t=$END-$START; print(f'   ceiling: smtp-source, 20000 messages of 4 kB, 16 sessions: {20000/t:.0f} messages/s')"
  openssl speed -seconds 3 rsa2048 2>/dev/null | awk '/^rsa 2048 bits/ {print "   ceiling: openssl speed rsa2048, one core:", $6, "signs/s"}'
  # The send path's own tables (emails, their events, the delivery jobs) get rows and, on
  # PostgreSQL, statistics before the measured runs, as a deployment that has been sending has:
  # 3 s of unsigned sends, delivered, then ANALYZE (WARM=0 skips both). Statistics of a nearly
  # empty `emails` make PostgreSQL plan each foreign-key check of an email event as a scan of
  # the whole table, and keep that plan as the table grows (see docs/benchmarks.md, "The send
  # benchmark's statistics").
  if [ "${WARM:-1}" != 0 ]; then
    HERALD_BENCH_FROM=hello@plain-bench.example wrk -t2 -c32 -d3s -s "$HERE/send.lua" http://127.0.0.1:$PORT >/dev/null
    wait_drained
    case "$url" in postgres*) psql "$url" -qc ANALYZE ;; esac
  fi
  # The same content as a stored template, which the last single-send run names by id.
  TEMPLATE=$(curl -sf "http://127.0.0.1:$PORT/templates" -H "Authorization: Bearer $HERALD_BENCH_KEY" \
    -H 'Content-Type: application/json' -d '{"name":"Order","type":"transactional",
      "subject":"Your order {{order ?? \"#1\"}}",
      "body":"<html><body><p>Hello {{firstName ?? \"there\"}},</p><p>Thanks for your order. <a href=\"https://shop.example/orders/{{order}}\">See it here</a>.</p></body></html>"}' \
    | python3 -c "import json,sys;print(json.load(sys.stdin)['id'])")
  for run in "signed dkim-bench.test" "unsigned plain-bench.example" "unsigned,_stored_template plain-bench.example"; do
    set -- $run
    export HERALD_BENCH_FROM="hello@$2"
    case "$1" in *template) export HERALD_BENCH_TEMPLATE=$TEMPLATE ;; *) unset HERALD_BENCH_TEMPLATE ;; esac
    BEFORE=$(curl -sf "http://127.0.0.1:$PORT/activity/stats?days=1" -H "Authorization: Bearer $HERALD_BENCH_KEY" | python3 -c "import json,sys;print(json.load(sys.stdin)['totals'].get('sent',0))")
    echo "-- POST /v1/send, ${1//_/ } ($2), into smtp-sink"
    START=$(date +%s.%N)
    wrk -t2 -c32 -d"$DURATION" --latency -s "$HERE/send.lua" http://127.0.0.1:$PORT | grep -E "Requests/sec|Latency|50%|99%|requests in|Non-2xx"
    wait_drained
    END=$(date +%s.%N)
    SENT=$(curl -sf "http://127.0.0.1:$PORT/activity/stats?days=1" -H "Authorization: Bearer $HERALD_BENCH_KEY" | python3 -c "import json,sys;print(json.load(sys.stdin)['totals'].get('sent',0))")
    python3 -c "n=$SENT-$BEFORE; t=$END-$START; print(f'   end to end: {n} emails handed to SMTP in {t:.1f} s = {n/t:.0f} emails/s')"
    grep -E "VmHWM|VmRSS" /proc/$SERVER/status | tr -s ' ' | sed 's/^/   /'
  done
  unset HERALD_BENCH_TEMPLATE
  # Delivery alone: 10,000 emails queued in 200 requests of 50 recipients (intake is then no
  # limit), timed from the first request until the queue is empty and counted as sent.
  for run in "signed dkim-bench.test" "unsigned plain-bench.example"; do
    set -- $run
    echo "-- delivery of 10,000 queued emails, $1 ($2), into smtp-sink"
    python3 - "$HERALD_BENCH_KEY" $PORT "hello@$2" "$1" <<'PY'
import json, sys, time, threading, urllib.request
key, port, sender, tag = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
def get(path):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"Authorization": "Bearer " + key})
    return json.load(urllib.request.urlopen(req))
before = get("/activity/stats?days=1")["totals"].get("sent", 0)
def post(batch):
    for r in range(batch * 25, batch * 25 + 25):
        body = json.dumps({"to": [f"drain-{tag}-{r}-{i}@example.com" for i in range(50)], "from": sender,
                           "subject": "Hello {{email}}", "body": "<p>Hi {{email}}</p>"}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/send", data=body,
            headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
        assert urllib.request.urlopen(req).status == 200
start = time.time()
threads = [threading.Thread(target=post, args=(b,)) for b in range(8)]
for t in threads: t.start()
for t in threads: t.join()
queued = time.time() - start
# Waits until no email is left queued (an email being handed off stays queued until its outcome
# is written), asking the cheap count of queued emails; the sent ones are counted once, after.
# Polling `/activity/stats` instead (three aggregates over the project's email events, 40-75 ms
# of PostgreSQL's time each with 40,000 emails sent) took a third of a core from the run.
while get("/activity/upcoming")["queuedEmails"] > 0 and time.time() - start < 300:
    time.sleep(0.2)
took = time.time() - start
sent = get("/activity/stats?days=1")["totals"].get("sent", 0) - before
print(f"   queued in {queued:.1f} s; {sent} emails sent in {took:.1f} s = {sent/took:.0f} emails/s")
PY
    grep -E "VmHWM" /proc/$SERVER/status | tr -s ' ' | sed 's/^/   /'
  done
  fi
  if want million; then
  # GET /contacts at a million contacts: ten 100,000-row imports (the import's file cap is 5 MB),
  # counted, then the first page (with its total) and a search under wrk.
  echo "-- 1,000,000 contacts by ten CSV imports of 100,000 rows"
  START=$(date +%s.%N)
  for part in $(seq 0 9); do
    python3 - "$WORK/m.csv" $part <<'PY'
import sys
part = int(sys.argv[2])
with open(sys.argv[1], "w") as f:
    f.write("email,first_name,plan,seats\n")
    for i in range(part * 100_000, (part + 1) * 100_000):
        f.write(f"m{i}@example.com,P{i},pro,{i % 50}\n")
PY
    JOB=$(curl -sf "http://127.0.0.1:$PORT/contacts/import" -H "Authorization: Bearer $HERALD_BENCH_KEY" -F "file=@$WORK/m.csv;type=text/csv" | python3 -c "import json,sys;print(json.load(sys.stdin)['jobId'])")
    while :; do
      STATE=$(curl -sf "http://127.0.0.1:$PORT/contacts/import/$JOB" -H "Authorization: Bearer $HERALD_BENCH_KEY" | python3 -c "import json,sys;print(json.load(sys.stdin)['state'])")
      case "$STATE" in completed|failed) break;; esac
      sleep 0.2
    done
    [ "$STATE" = completed ] || { echo "   import $part: $STATE"; exit 1; }
  done
  END=$(date +%s.%N)
  curl -sf "http://127.0.0.1:$PORT/contacts?limit=1" -H "Authorization: Bearer $HERALD_BENCH_KEY" \
    | python3 -c "import json,sys;print('   contacts:', json.load(sys.stdin)['total'], 'after $(python3 -c "print(round($END-$START))") s of imports')"
  echo "-- GET /contacts at a million contacts (first page, with total)"
  wrk -t2 -c32 -d"$DURATION" --latency -s "$HERE/get_contacts.lua" http://127.0.0.1:$PORT/contacts | grep -E "Requests/sec|Latency|50%|99%|requests in|Non-2xx"
  echo "-- GET /contacts?limit=100 at a million contacts, one connection (latency of one request)"
  wrk -t1 -c1 -d"$DURATION" --latency -s "$HERE/get_contacts.lua" "http://127.0.0.1:$PORT/contacts?limit=100" | grep -E "Requests/sec|Latency|50%|99%|requests in|Non-2xx"
  grep -E "VmHWM" /proc/$SERVER/status | tr -s ' ' | sed 's/^/   /'
  fi
  if want attachments; then
  # One request: 50 recipients, one 10 MB attachment. Each message is built at hand-off, so the
  # peak stays near the request's own size plus the messages being handed off at once.
  grep -E "VmHWM" /proc/$SERVER/status | tr -s ' ' | sed 's/^/   before: /'
  python3 - "$HERALD_BENCH_KEY" $PORT <<'PY'
import base64, json, os, sys, time, urllib.request
key, port = sys.argv[1], sys.argv[2]
body = json.dumps({"to": [f"att-{i}@example.com" for i in range(50)], "from": "hello@plain-bench.example",
  "subject": "Report", "body": "<p>Your report, {{email}}</p>",
  "attachments": [{"filename": "report.bin", "contentType": "application/octet-stream",
                   "content": base64.b64encode(os.urandom(10 * 1024 * 1024)).decode()}]}).encode()
print(f"-- POST /v1/send, 50 recipients with a 10 MB attachment (request {len(body)/1e6:.1f} MB)")
req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/send", data=body,
  headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
start = time.time()
assert urllib.request.urlopen(req).status == 200
print(f"   queued in {time.time() - start:.2f} s")
PY
  wait_drained
  grep -E "VmHWM" /proc/$SERVER/status | tr -s ' ' | sed 's/^/   after delivery: /'
  fi
  kill $SERVER; wait $SERVER 2>/dev/null || true
}

[ "${BACKEND:-sqlite}" = sqlite ] && bench_backend sqlite "sqlite://$WORK/bench.db"
if [ "${BACKEND:-postgres}" != postgres ]; then
  :
elif pg_isready -h 127.0.0.1 -p 5432 -q; then
  DB="herald_bench_$$"
  psql -h 127.0.0.1 -U postgres -qc "CREATE DATABASE $DB"
  bench_backend postgres "postgres://postgres@127.0.0.1:5432/$DB"
  psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE $DB WITH (FORCE)"
else
  echo "PostgreSQL not reachable; skipped its half"
fi
