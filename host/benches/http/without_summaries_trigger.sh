#!/usr/bin/env bash
# A stand-in for a herald binary to give host/benches/http/pair.sh as its "before": the same
# release binary (REAL_HERALD_BIN, else target/release/herald; not a HERALD_ variable, which
# herald would warn of), on a database whose `events_to_summaries` trigger is dropped right
# after `herald init` has applied the migrations. The pair then measures what keeping the event summaries costs /v1/track and
# nothing else:
#   host/benches/http/pair.sh host/benches/http/without_summaries_trigger.sh target/release/herald postgres track 5
# (Without the trigger the summaries are not kept: filters on events read nothing. A benchmark
# only.)
set -euo pipefail
BIN=${REAL_HERALD_BIN:-$(dirname "$0")/../../../target/release/herald}
if [ "${1:-}" != init ]; then
  exec "$BIN" "$@"
fi
"$BIN" "$@"
# pair.sh (common.sh's `serve`) always names the database with --database-url.
url=
while [ $# -gt 0 ]; do
  [ "$1" = --database-url ] && url=$2
  shift
done
case $url in
  postgres*) psql "$url" -qc "DROP TRIGGER events_to_summaries ON events" >&2 ;;
  sqlite*) python3 - "${url#sqlite://}" <<'PY'
import sqlite3, sys
con = sqlite3.connect(sys.argv[1])
con.execute("DROP TRIGGER events_to_summaries")
con.commit()
PY
  ;;
  *) echo "without_summaries_trigger.sh: init needs --database-url" >&2; exit 2 ;;
esac
