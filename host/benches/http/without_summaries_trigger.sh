#!/usr/bin/env bash
# A stand-in for a herald binary to give host/benches/http/pair.sh as its "before": the same
# release binary (HERALD_REAL_BIN, else target/release/herald), on a database whose
# `events_to_summaries` trigger is dropped right after `herald init` has applied the
# migrations. The pair then measures what keeping the event summaries costs /v1/track and
# nothing else:
#   host/benches/http/pair.sh host/benches/http/without_summaries_trigger.sh target/release/herald postgres track 5
# (Without the trigger the summaries are not kept: filters on events read nothing. A benchmark
# only.)
set -euo pipefail
BIN=${HERALD_REAL_BIN:-$(dirname "$0")/../../../target/release/herald}
if [ "${1:-}" != init ]; then
  exec "$BIN" "$@"
fi
"$BIN" "$@"
url= dir=
while [ $# -gt 0 ]; do
  case $1 in
    --database-url) url=$2; shift ;;
    --data-dir) dir=$2; shift ;;
  esac
  shift
done
[ -n "$url" ] || url="sqlite://${dir:-./data}/herald.db"
case $url in
  postgres*) psql "$url" -qc "DROP TRIGGER events_to_summaries ON events" >&2 ;;
  sqlite*) python3 - "${url#sqlite://}" <<'PY'
import sqlite3, sys
con = sqlite3.connect(sys.argv[1])
con.execute("DROP TRIGGER events_to_summaries")
con.commit()
PY
  ;;
esac
