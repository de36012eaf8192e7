#!/usr/bin/env python3
"""Bounces received over SMTP and applied, on SQLite (and PostgreSQL when reachable), against a
release build of Herald's own SMTP server (`inbound.listen`).

For each database: `herald init` makes a project, N sent emails are written by SQL into the fresh
database (each with its return path `bounces+<id>@bounces.acme.test`, as a verified domain's
emails have), then `herald serve` listens for mail and 32 concurrent SMTP sessions (Python's
smtplib, one thread each, several messages a session) send each email's return path an RFC 3464
delivery status notification reporting its recipient as unknown (5.1.1). The script measures:

1. Bounces applied per second, from the first connection to the last `250` (each `250` comes
   after the bounce is committed); rows counted after the run: emails `bounced`, their history
   entries, and contacts unsubscribed.
2. Memory: the server's peak RSS (VmHWM) at the end.
3. The ceiling, first: the same sessions and messages into a counting SMTP sink, no Herald.

Usage: host/benches/smtp/run.py [N, default 20000]
Needs a release build (cargo build --release; CARGO_TARGET_DIR is honoured; HERALD_BIN runs
another binary), and psql with PostgreSQL on 127.0.0.1:5432 for the PostgreSQL run.
"""
import json
import os
import shutil
import smtplib
import subprocess
import sys
import tempfile
import threading
import time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common import Db, sink_count, start_sink  # noqa: E402

ROOT = os.path.dirname(os.path.abspath(__file__)) + "/../../.."
BIN = os.environ.get("HERALD_BIN") or (
    os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")) + "/release/herald"
)
PORT = 18294
SMTP_PORT = 18225
SINK_PORT = 18226
SESSIONS = 32
PER_SESSION = 50
N = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
PG = "postgres://postgres@127.0.0.1:5432"


def load(db, project, n):
    """N contacts and one sent email to each, with its return path."""
    pg = db.url.startswith("postgres")
    hexid = "lpad(to_hex(g), 32, '0')" if pg else "printf('%032x', g)"
    series = (
        f"generate_series(1::bigint, {n}) AS s(g)"
        if pg
        else f"(WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < {n}) SELECT g FROM s)"
    )
    now = int(time.time() * 1000)
    db.run(
        f"INSERT INTO contacts (id, project_id, email, subscribed, data, version, created_at, updated_at) "
        f"SELECT 'cnt_' || {hexid}, '{project}', 'c' || g || '@example.com', TRUE, '{{}}', 0, {now}, {now} "
        f"FROM {series}"
    )
    db.run(
        f"INSERT INTO emails (id, project_id, contact_id, kind, from_address, to_address, subject, status, "
        f"message_id, envelope_from, created_at, updated_at, sent_at) "
        f"SELECT 'eml_' || {hexid}, '{project}', 'cnt_' || {hexid}, 'transactional', 'hello@acme.test', "
        f"'c' || g || '@example.com', 's', 'sent', 'eml_' || {hexid} || '@acme.test', "
        f"'bounces+eml_' || {hexid} || '@bounces.acme.test', {now}, {now}, {now} FROM {series}"
    )
    if pg:
        db.run("ANALYZE emails")


def dsn(g):
    email = f"eml_{g:032x}"
    rcpt = f"c{g}@example.com"
    return_path = f"bounces+{email}@bounces.acme.test"
    message = (
        f"From: MAILER-DAEMON@mx.example.com\r\nTo: {return_path}\r\n"
        f"Subject: Undelivered Mail Returned to Sender\r\nMIME-Version: 1.0\r\n"
        f"Content-Type: multipart/report; report-type=delivery-status; boundary=\"B\"\r\n\r\n"
        f"--B\r\nContent-Type: text/plain\r\n\r\nYour message could not be delivered.\r\n\r\n"
        f"--B\r\nContent-Type: message/delivery-status\r\n\r\nReporting-MTA: dns; mx.example.com\r\n\r\n"
        f"Final-Recipient: rfc822; {rcpt}\r\nAction: failed\r\nStatus: 5.1.1\r\n"
        f"Diagnostic-Code: smtp; 550 5.1.1 user unknown\r\n\r\n"
        f"--B\r\nContent-Type: text/rfc822-headers\r\n\r\nMessage-ID: <{email}@acme.test>\r\n"
        f"To: {rcpt}\r\n\r\n--B--\r\n"
    )
    return return_path, message


def sessions(n, port=SMTP_PORT):
    """Sends every email's DSN over SESSIONS concurrent sessions to `port`; answers the refusals."""
    todo = list(range(1, n + 1))
    lock = threading.Lock()
    refused = []

    def worker():
        while True:
            with lock:
                batch, todo[:] = todo[:PER_SESSION], todo[PER_SESSION:]
            if not batch:
                return
            with smtplib.SMTP("127.0.0.1", port, timeout=120) as smtp:
                for g in batch:
                    rcpt, message = dsn(g)
                    try:
                        smtp.sendmail("<>", [rcpt], message)
                    except smtplib.SMTPException as e:
                        with lock:
                            refused.append(str(e))

    threads = [threading.Thread(target=worker) for _ in range(SESSIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return refused


def bench(name, url, n):
    data = tempfile.mkdtemp()
    url = url or f"sqlite://{os.path.join(data, 'herald.db')}"
    db = Db(url, data)
    init = json.loads(
        subprocess.run(
            [BIN, "init", "--json", "--data-dir", data, "--database-url", url],
            capture_output=True, text=True, check=True,
        ).stdout
    )
    project = init["projectId"]
    began = time.perf_counter()
    load(db, project, n)
    print(f"### {name}: {n:,} sent emails (loaded by SQL in {time.perf_counter() - began:.1f} s)")
    env = dict(
        os.environ, HERALD_LOG="warn",
        HERALD_INBOUND__LISTEN=f"127.0.0.1:{SMTP_PORT}",
        HERALD_INBOUND__MAX_CONNECTIONS_PER_IP="0",
        HERALD_INBOUND__MESSAGES_PER_IP_PER_MINUTE="0",
        # Suspension on the bounce rate is measured as it would be, but must not matter here.
        HERALD_SECURITY__MIN_VOLUME="100000000",
    )
    server = subprocess.Popen(
        [BIN, "serve", "--listen", f"127.0.0.1:{PORT}", "--data-dir", data, "--database-url", url],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(200):
            try:
                smtplib.SMTP("127.0.0.1", SMTP_PORT, timeout=5).quit()
                break
            except OSError:
                time.sleep(0.1)
        started = time.perf_counter()
        refused = sessions(n)
        took = time.perf_counter() - started
        bounced = db.run(f"SELECT COUNT(*) FROM emails WHERE project_id = '{project}' AND status = 'bounced'")
        history = db.run(f"SELECT COUNT(*) FROM email_events WHERE project_id = '{project}' AND kind = 'bounced'")
        unsubscribed = db.run(f"SELECT COUNT(*) FROM contacts WHERE project_id = '{project}' AND NOT subscribed")
        print(f"- {n:,} bounces over {SESSIONS} sessions: {took:.1f} s, {int(bounced) / took:,.0f} applied/s; "
              f"rows: {bounced} emails bounced, {history} history entries, {unsubscribed} contacts unsubscribed; "
              f"{len(refused)} refused{': ' + refused[0] if refused else ''}")
        with open(f"/proc/{server.pid}/status") as f:
            hwm = next(l for l in f if l.startswith("VmHWM")).split()[1]
        print(f"- peak RSS: {int(hwm) / 1024:.0f} MiB")
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(data, ignore_errors=True)


def with_pg(run):
    db = f"herald_bench_smtp_{int(time.time())}"
    try:
        subprocess.run(["psql", f"{PG}/postgres", "-qc", f"CREATE DATABASE {db}"], check=True, capture_output=True)
    except (subprocess.CalledProcessError, FileNotFoundError):
        print("### PostgreSQL: not reachable on 127.0.0.1:5432; skipped")
        return
    try:
        run(f"{PG}/{db}")
    finally:
        subprocess.run(["psql", f"{PG}/postgres", "-qc", f"DROP DATABASE {db}"], capture_output=True)


def ceiling(n):
    """The same sessions and messages straight into a counting sink (`../common.py`), no Herald:
    the client's and the machine's own limit, measured in the same run."""
    sinkp = start_sink(SINK_PORT)
    try:
        started = time.perf_counter()
        refused = sessions(n, SINK_PORT)
        took = time.perf_counter() - started
        got = sink_count(SINK_PORT)
        print(f"### Ceiling: {n:,} DSNs over {SESSIONS} sessions straight into a sink: {took:.1f} s, "
              f"{got / took:,.0f}/s; {len(refused)} refused")
    finally:
        sinkp.terminate()
        sinkp.wait()


def main():
    ceiling(N)
    bench("SQLite", None, N)
    with_pg(lambda url: bench("PostgreSQL", url, N))


if __name__ == "__main__":
    main()
