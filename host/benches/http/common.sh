# What pair.sh and between.sh share; sourced from the repository's root. Defines the ports, the
# API helpers, PostgreSQL's CPU, and `serve BIN URL WORK`, which makes a project on a fresh
# database at URL and starts `herald serve` on it (its pid in SERVER), ready for the wrk scripts.
HERE=host/benches/http
PORT=18181 DNS_PORT=18153 SMTP_PORT=18125
if curl -sf http://127.0.0.1:$PORT/health >/dev/null 2>&1; then
  echo "port $PORT is taken: stop the server listening there first" >&2; exit 1
fi
api() { curl -sf "http://127.0.0.1:$PORT$1" -H "Authorization: Bearer $HERALD_BENCH_KEY"; }
queued() { api /activity/upcoming | python3 -c "import json,sys;print(json.load(sys.stdin)['queuedEmails'])"; }
sent() { api "/activity/stats?days=1" | python3 -c "import json,sys;print(json.load(sys.stdin)['totals'].get('sent',0))"; }
drain() { for _ in $(seq 1 1500); do [ "$(queued)" = 0 ] && return; sleep 0.2; done; echo "   not drained in 300 s" >&2; }
# PostgreSQL's CPU ticks so far: its live processes' own, and the ones of its exited backends
# (which the postmaster reaped into its children's times). The postmaster is found by Debian's
# pid file; without one this is 0 and no PostgreSQL figure is printed.
pg_ticks() {
  local pm total=0
  pm=$(head -1 /var/run/postgresql/*.pid 2>/dev/null | grep -E '^[0-9]+$' | head -1)
  [ -z "$pm" ] && { echo 0; return; }
  total=$(awk '{print $16+$17}' /proc/$pm/stat)
  for p in $pm $(pgrep -P "$pm"); do
    total=$((total + $(awk '{print $14+$15}' /proc/$p/stat 2>/dev/null || echo 0)))
  done
  echo $total
}
# Unsigned mail from a domain nobody verified, into the smtp-sink on SMTP_PORT, resolved by the
# dnsd on DNS_PORT; the rate limit out of the way.
serve() {
  local bin=$1 url=$2 work=$3
  env -u HERALD_BENCH_KEY -u HERALD_BENCH_PUBLIC_KEY -u HERALD_BENCH_FROM "$bin" init --json --database-url "$url" --data-dir "$work" > "$work/init.json"
  export HERALD_BENCH_KEY=$(python3 -c "import json;print(json.load(open('$work/init.json'))['secretKey'])")
  export HERALD_BENCH_PUBLIC_KEY=$(python3 -c "import json;print(json.load(open('$work/init.json'))['publicKey'])")
  export HERALD_BENCH_FROM=hello@plain-bench.example
  env -u HERALD_BENCH_KEY -u HERALD_BENCH_PUBLIC_KEY -u HERALD_BENCH_FROM HERALD_RATE_LIMIT_PER_MINUTE=100000000 HERALD_LOG=error \
    HERALD_PLUGINS__DNS_NAMESERVERS="[\"127.0.0.1:$DNS_PORT\"]" \
    HERALD_PLUGINS__TRANSPORT=smtp HERALD_PLUGINS__SMTP_HOST=127.0.0.1 HERALD_PLUGINS__SMTP_PORT=$SMTP_PORT \
    HERALD_PLUGINS__SMTP_TLS=none HERALD_DOMAINS__ALLOW_UNVERIFIED=true \
    "$bin" serve --listen 127.0.0.1:$PORT --database-url "$url" --data-dir "$work" 2>/dev/null &
  SERVER=$!
  for _ in $(seq 1 100); do curl -sf http://127.0.0.1:$PORT/ready >/dev/null && break; sleep 0.1; done
}
