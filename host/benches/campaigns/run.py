#!/usr/bin/env python3
"""A campaign to a large audience, on SQLite and PostgreSQL, against a release build.

For each database: `herald init` makes a project, N subscribed contacts are written by SQL into
the fresh database, then `herald serve` (the `smtp` transport into Postfix's `smtp-sink` on
loopback, 16 job workers, an SMTP pool of 16, no per-project throttle, unverified senders allowed
so the mail goes unsigned) sends two campaigns to them, one after the other:

- plain: one `ALL` campaign to the N contacts;
- A/B + topic: an `ALL` campaign about a topic (`OPT_IN`; a tenth of the contacts opted out of it,
  a third opted in explicitly, the rest on the default), with an A/B test of two variants
  (`testFraction` 0.2, `testDuration` 1 s, winner by opens): the test group first, then the
  winner to the rest. Its recipients are the 90 % subscribed to the topic;
- the plain campaign once more (the first run also warms the server up; the A/B + topic
campaign is compared with the faster of the two plain runs). For each campaign the script
measures:

1. Snapshot: from the `send` answer to the last recipient in the ledger (`snapshot_done` and
   `recipient_count` as expected, polled in the database every 50 ms), while the batches render
   and deliver at the same time. Beside it, the ceiling of the same run: one `INSERT … SELECT` of
   the N contact ids into a scratch table, timed in the database's own client.
2. Delivery: from the `send` answer to `SENT`, emails per second end to end; rows counted after
   (ledger rows, emails `sent`). The A/B + topic campaign's rate is given beside the plain one's
   (the aim: within 10 %).
3. Memory: the server's peak RSS (VmHWM) at the end.

With SNAPSHOT_ONLY=M (PostgreSQL only), it loads M contacts, measures the snapshot alone as in 1,
then cancels the campaign (the aim there is the snapshot of 1,000,000 under 60 s).

Usage: host/benches/campaigns/run.py [N, default 100000]
       BACKENDS=sqlite host/benches/campaigns/run.py   (or postgres; both by default)
       SNAPSHOT_ONLY=1000000 host/benches/campaigns/run.py
Needs a release build (cargo build --release; CARGO_TARGET_DIR is honoured; HERALD_BIN runs
another binary), smtp-sink (apt-get install postfix), psql, and PostgreSQL on 127.0.0.1:5432.
"""
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common import Db  # noqa: E402

ROOT = os.path.dirname(os.path.abspath(__file__)) + "/../../.."
BIN = os.environ.get("HERALD_BIN") or (
    os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")) + "/release/herald"
)
PORT = 18293
SMTP_PORT = 18126
N = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
SNAPSHOT_ONLY = int(os.environ.get("SNAPSHOT_ONLY", "0"))
PG = "postgres://postgres@127.0.0.1:5432"


def call(method, path, key, body=None):
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=600)
    headers = {"Authorization": f"Bearer {key}"}
    payload = None
    if body is not None:
        payload, headers["Content-Type"] = json.dumps(body), "application/json"
    conn.request(method, path, body=payload, headers=headers)
    reply = conn.getresponse()
    text = reply.read()
    conn.close()
    if reply.status >= 400:
        raise RuntimeError(f"{method} {path}: {reply.status} {text[:300]!r}")
    return json.loads(text) if text else None


TOPIC = "top_" + "b" * 32


def load(db, project, n):
    """N subscribed contacts; a topic, with a tenth of them opted out and a third opted in."""
    pg = db.url.startswith("postgres")
    hexid = "lpad(to_hex(g), 32, '0')" if pg else "printf('%032x', g)"
    obj = "jsonb_build_object" if pg else "json_object"
    series = (
        f"generate_series(1::bigint, {n}) AS s(g)"
        if pg
        else f"(WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < {n}) SELECT g FROM s)"
    )
    now = int(time.time() * 1000)
    db.run(
        f"INSERT INTO topics (id, project_id, name, default_subscription, visibility, created_at, updated_at) "
        f"VALUES ('{TOPIC}', '{project}', 'News', 'OPT_IN', 'PUBLIC', {now}, {now})"
    )
    choice = (
        f"CASE WHEN g % 10 = 0 THEN {obj}('{TOPIC}', FALSE) "
        f"WHEN g % 3 = 0 THEN {obj}('{TOPIC}', TRUE) ELSE {obj}() END"
    )
    if not pg:
        # SQLite's json_object takes 0/1 for booleans; json('false') keeps the JSON type.
        choice = choice.replace("FALSE)", "json('false'))").replace("TRUE)", "json('true'))")
    db.run(
        f"INSERT INTO contacts (id, project_id, email, subscribed, data, version, created_at, updated_at, topics) "
        f"SELECT 'cnt_' || {hexid}, '{project}', 'c' || g || '@example.com', TRUE, "
        f"{obj}('firstName', 'Reader ' || g), 0, {now}, {now}, {choice} FROM {series}"
    )
    if pg:
        db.run("ANALYZE contacts")


def ceiling(db, project):
    """Seconds of one INSERT … SELECT of the project's contact ids, in the database's own client."""
    db.run("CREATE TABLE IF NOT EXISTS bench_scratch (id TEXT)")
    began = time.perf_counter()
    db.run(f"INSERT INTO bench_scratch SELECT id FROM contacts WHERE project_id = '{project}' AND subscribed ORDER BY id")
    took = time.perf_counter() - began
    db.run("DROP TABLE bench_scratch")
    return took


def campaign(db, key, body, n, floor, snapshot_only):
    """Creates and sends one campaign to n recipients; answers its emails/s end to end."""
    cmp = call("POST", "/campaigns", key, body)["data"]["id"]
    started = time.perf_counter()
    call("POST", f"/campaigns/{cmp}/send", key)
    snapshot = None
    deadline = time.time() + 3600
    while True:
        if snapshot is None:
            done = db.run(f"SELECT COUNT(*) FROM campaigns WHERE id = '{cmp}' AND snapshot_done AND recipient_count = {n}")
            if done == "1":
                snapshot = time.perf_counter() - started
                print(f"- {body['name']}: snapshot of {n:,} recipients: {snapshot:.1f} s ({n / snapshot:,.0f} rows/s) "
                      f"while batches render; ceiling in the same run, one INSERT … SELECT of the ids: "
                      f"{floor:.2f} s")
                if snapshot_only:
                    call("POST", f"/campaigns/{cmp}/cancel", key)
                    break
        if snapshot is not None and call("GET", f"/campaigns/{cmp}", key)["status"] == "SENT":
            break
        if time.time() > deadline:
            sys.exit("the campaign did not finish within an hour")
        time.sleep(0.05)
    total = time.perf_counter() - started
    ledger = db.run(f"SELECT COUNT(*) FROM campaign_recipients WHERE campaign_id = '{cmp}'")
    sent = db.run(f"SELECT COUNT(*) FROM emails WHERE campaign_id = '{cmp}' AND status = 'sent'")
    if snapshot_only:
        print(f"- rows: {ledger} ledger rows; {sent} emails sent before the cancel")
        return 0.0
    rate = int(sent) / total
    print(f"- {body['name']}: send to SENT: {total:.1f} s, {rate:,.0f} emails/s end to end into smtp-sink; "
          f"rows: {ledger} ledger rows, {sent} emails sent")
    if int(sent) != n:
        sys.exit(f"{body['name']}: {sent} emails sent, expected {n}")
    return rate


def bench(name, url, n, snapshot_only):
    data = tempfile.mkdtemp()
    url = url or f"sqlite://{os.path.join(data, 'herald.db')}"
    db = Db(url, data)
    init = json.loads(
        subprocess.run(
            [BIN, "init", "--json", "--data-dir", data, "--database-url", url],
            capture_output=True, text=True, check=True,
        ).stdout
    )
    key, project = init["secretKey"], init["projectId"]
    began = time.perf_counter()
    load(db, project, n)
    print(f"### {name}: {n:,} contacts (loaded by SQL in {time.perf_counter() - began:.1f} s)")
    floor = ceiling(db, project)
    env = dict(
        os.environ, HERALD_LOG="warn", HERALD_RATE_LIMIT_PER_MINUTE="100000000",
        HERALD_PLUGINS__TRANSPORT="smtp", HERALD_PLUGINS__SMTP_HOST="127.0.0.1",
        HERALD_PLUGINS__SMTP_PORT=str(SMTP_PORT), HERALD_PLUGINS__SMTP_TLS="none",
        HERALD_PLUGINS__SMTP_POOL_SIZE="16", HERALD_SENDING__PER_PROJECT_PER_SECOND="0",
        HERALD_JOBS_CONCURRENCY="16", HERALD_JOBS_POLL_INTERVAL_MS="20",
        HERALD_DOMAINS__ALLOW_UNVERIFIED="true",
    )
    server = subprocess.Popen(
        [BIN, "serve", "--listen", f"127.0.0.1:{PORT}", "--data-dir", data, "--database-url", url],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            try:
                call("GET", "/ready", key)
                break
            except OSError:
                time.sleep(0.1)
        body = "<p>Hello {{firstName}},</p><p>Read <a href=\"https://example.com/news\">the news</a>.</p>"
        plain = {"name": "plain", "subject": "News for {{firstName}}", "body": body,
                 "from": "news@acme.test", "audienceType": "ALL"}
        rates = {}
        rates["plain"] = campaign(db, key, plain, n, floor, snapshot_only)
        if not snapshot_only:
            ab = dict(plain, name="A/B + topic", topicId=TOPIC, variants=[
                {"subject": "News for {{firstName}}", "body": body},
                {"subject": "{{firstName}}, the news", "body": body.replace("Read", "See")},
            ], testFraction=0.2, winnerMetric="OPEN_RATE", testDuration=1)
            rates["ab"] = campaign(db, key, ab, n - n // 10, floor, False)
            # The plain campaign again, warm as the A/B one was: the comparison is with the
            # faster of the two plain runs.
            rates["plain again"] = campaign(db, key, dict(plain, name="plain again"), n, floor, False)
            best = max(rates["plain"], rates["plain again"])
            print(f"- A/B + topic vs the faster plain run, emails/s: {rates['ab']:,.0f} vs {best:,.0f} "
                  f"({(rates['ab'] / best - 1) * 100:+.1f} %)")
        with open(f"/proc/{server.pid}/status") as f:
            hwm = next(l for l in f if l.startswith("VmHWM")).split()[1]
        print(f"- peak RSS: {int(hwm) / 1024:.0f} MiB")
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(data, ignore_errors=True)


def with_pg(run):
    db = f"herald_bench_cmp_{int(time.time())}"
    try:
        subprocess.run(["psql", f"{PG}/postgres", "-qc", f"CREATE DATABASE {db}"], check=True, capture_output=True)
    except (subprocess.CalledProcessError, FileNotFoundError):
        print("### PostgreSQL: not reachable on 127.0.0.1:5432; skipped")
        return
    try:
        run(f"{PG}/{db}")
    finally:
        subprocess.run(["psql", f"{PG}/postgres", "-qc", f"DROP DATABASE {db}"], capture_output=True)


def main():
    sink = subprocess.Popen(["smtp-sink", "-u", os.environ.get("USER", "root"), f"127.0.0.1:{SMTP_PORT}", "1024"])
    try:
        if SNAPSHOT_ONLY:
            with_pg(lambda url: bench("PostgreSQL (snapshot only)", url, SNAPSHOT_ONLY, True))
            return
        backends = os.environ.get("BACKENDS", "sqlite,postgres").split(",")
        if "sqlite" in backends:
            bench("SQLite", None, N, False)
        if "postgres" in backends:
            with_pg(lambda url: bench("PostgreSQL", url, N, False))
    finally:
        sink.terminate()


if __name__ == "__main__":
    main()
