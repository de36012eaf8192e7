#!/usr/bin/env python3
"""SMTP submission end to end, beside POST /v1/send in the same run, on SQLite (and PostgreSQL
when reachable), against a release build of Herald's submission listener (`submission.listen`).

A counting SMTP sink (`../common.py --sink PORT`, asyncio, in its own process) stands for the
receiving servers. For each database: `herald init` makes a project, its open and click
tracking are turned off by SQL, then `herald serve` runs with the `smtp` transport into the sink
(32 job workers, an SMTP pool of 16, no rate limits, unverified senders allowed so the mail goes
unsigned) and the submission listener on loopback (where `AUTH PLAIN` needs no TLS). The script
measures, each from the first connection until the sink has received all N messages:

1. Ceiling: 32 concurrent smtplib sessions (one thread each) sending N single-recipient messages
   straight to the sink, no Herald between: the Python client's and the sink's own limit.
2. Submission: the same 32 sessions, each logged in (`AUTH PLAIN`, any user, the project's secret
   key as the password) on the submission listener, sending N single-recipient messages; each
   becomes a queued email, which Herald delivers into the sink.
3. POST /v1/send: N requests of one recipient each over 32 concurrent keep-alive HTTP clients,
   the same content, delivered into the same sink.
4. Memory: the server's peak RSS (VmHWM) after the submission run and after the /v1/send run.

The aim (issue 76): submission ≥ 1,000 messages/s unsigned, peak RSS under 150 MB.

Usage: host/benches/smtp/submission.py [N, default 20000]
       BACKEND=sqlite host/benches/smtp/submission.py 20000   # SQLite only
Needs a release build (cargo build --release; CARGO_TARGET_DIR is honoured; HERALD_BIN runs
another binary), and psql with PostgreSQL on 127.0.0.1:5432 for the PostgreSQL run.
"""
import os
import shutil
import smtplib
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common import (  # noqa: E402
    CLIENTS, FROM, HTML, SUBJECT, http_clients, hwm, in_threads, init, note, serve, sink_count,
    smtp_env, start_sink, stop, timed, with_pg,
)

PORT = 18295
SUBMISSION_PORT = 18587
SINK_PORT = 18127
N = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000


def sunk():
    """Messages the sink has received so far."""
    return sink_count(SINK_PORT)


# --- The clients ----------------------------------------------------------------------------

def message(tag, g):
    rcpt = f"{tag}-{g}@example.com"
    return rcpt, (
        f"From: Bench <{FROM}>\r\nTo: <{rcpt}>\r\nSubject: {SUBJECT}\r\n"
        f"Message-ID: <{tag}-{g}-{time.time_ns()}@plain-bench.example>\r\n"
        f"MIME-Version: 1.0\r\nContent-Type: text/html; charset=utf-8\r\n\r\n"
        f"{HTML.format(n=g)}\r\n"
    )


def smtp_clients(port, tag, n, password=None):
    """Sends n single-recipient messages over CLIENTS concurrent sessions (logged in with
    `password` when given); the refusals."""
    refused = []
    lock = threading.Lock()

    def worker(numbers):
        with smtplib.SMTP("127.0.0.1", port, timeout=120) as smtp:
            if password:
                smtp.login("bench", password)
            for g in numbers:
                rcpt, msg = message(tag, g)
                try:
                    smtp.sendmail(FROM, [rcpt], msg)
                except smtplib.SMTPException as e:
                    with lock:
                        refused.append(str(e))

    in_threads(worker, n)
    return refused


ROWS = []


def bench(name, url, n):
    data, url, db, key, project = init(url)
    print(f"### {name}: {n:,} messages each way, {CLIENTS} concurrent clients")

    took, answered, got, refused = timed(lambda: smtp_clients(SINK_PORT, "ceil", n), n, sunk)
    print(f"- ceiling, smtplib straight into the sink: {took:.1f} s, {got:,} received{note(refused)}")
    ROWS.append((name, "ceiling: smtplib → sink (no Herald)", got, took, answered, None))

    settings = dict(
        smtp_env(SINK_PORT),
        HERALD_SUBMISSION__LISTEN=f"127.0.0.1:{SUBMISSION_PORT}",
        HERALD_SUBMISSION__MAX_CONNECTIONS_PER_IP="0",
        HERALD_SUBMISSION__MESSAGES_PER_IP_PER_MINUTE="0",
    )
    server = None
    try:
        server = serve(PORT, data, url, settings,
                       ready=lambda: smtplib.SMTP("127.0.0.1", SUBMISSION_PORT, timeout=5).quit())
        took, answered, got, refused = timed(
            lambda: smtp_clients(SUBMISSION_PORT, "sub", n, key), n, sunk)
        rss = hwm(server.pid)
        print(f"- SMTP submission → Herald → sink: {took:.1f} s (last 250 at {answered:.1f} s), "
              f"{got:,} received{note(refused)}")
        ROWS.append((name, "SMTP submission → Herald → sink", got, took, answered, rss))

        took, answered, got, refused = timed(lambda: http_clients(PORT, key, "api", n), n, sunk)
        rss = hwm(server.pid)
        print(f"- POST /v1/send → Herald → sink: {took:.1f} s (last answer at {answered:.1f} s), "
              f"{got:,} received{note(refused)}")
        ROWS.append((name, "POST /v1/send → Herald → sink", got, took, answered, rss))

        sent = db.run(f"SELECT COUNT(*) FROM emails WHERE project_id = '{project}' AND status = 'sent'")
        print(f"- rows: {sent} emails sent (of {2 * n:,})")
    finally:
        stop(server)
        shutil.rmtree(data, ignore_errors=True)


def table():
    print()
    print("| database | path | messages received | seconds to the last received | messages/s end to end "
          "| clients' last answer at | server peak RSS |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, path, got, took, answered, rss in ROWS:
        mem = "" if rss is None else f"{rss:.0f} MiB"
        print(f"| {name} | {path} | {got:,} | {took:.2f} s | {got / took:,.0f} | {answered:.2f} s | {mem} |")


def main():
    sinkp = start_sink(SINK_PORT)
    try:
        bench("SQLite", None, N)
        if os.environ.get("BACKEND") != "sqlite":
            with_pg(lambda url: bench("PostgreSQL", url, N), "sub")
        table()
    finally:
        sinkp.terminate()
        sinkp.wait()


if __name__ == "__main__":
    main()
