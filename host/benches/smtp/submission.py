#!/usr/bin/env python3
"""SMTP submission end to end, beside POST /v1/send in the same run, on SQLite (and PostgreSQL
when reachable), against a release build of Herald's submission listener (`submission.listen`).

A counting SMTP sink (this script run as `--sink PORT`, asyncio, in its own process) stands for
the receiving servers. For each database: `herald init` makes a project, its open and click
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
import asyncio
import http.client
import json
import os
import shutil
import smtplib
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.abspath(__file__)) + "/../../.."
BIN = os.environ.get("HERALD_BIN") or (
    os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")) + "/release/herald"
)
PORT = 18295
SUBMISSION_PORT = 18587
SINK_PORT = 18127
CLIENTS = 32
N = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1] != "--sink" else 20_000
PG = "postgres://postgres@127.0.0.1:5432"
FROM = "hello@plain-bench.example"
SUBJECT = "Your order"
HTML = "<html><body><p>Hello there,</p><p>Thanks for your order #{n}. " \
       "<a href=\"https://shop.example/orders/{n}\">See it here</a>.</p></body></html>"


# --- The sink -------------------------------------------------------------------------------

def sink(port):
    """Accepts every message and counts them; `XCOUNT` answers `250 <messages> <recipients>`."""
    counts = [0, 0]

    async def session(reader, writer):
        rcpts = 0
        writer.write(b"220 sink ESMTP\r\n")
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                verb = line[:4].upper()
                if verb in (b"EHLO", b"HELO"):
                    writer.write(b"250-sink\r\n250-8BITMIME\r\n250-PIPELINING\r\n250 SIZE 104857600\r\n")
                elif verb == b"MAIL":
                    rcpts = 0
                    writer.write(b"250 2.1.0 ok\r\n")
                elif verb == b"RCPT":
                    rcpts += 1
                    writer.write(b"250 2.1.5 ok\r\n")
                elif verb == b"DATA":
                    writer.write(b"354 go ahead\r\n")
                    await writer.drain()
                    while True:
                        data = await reader.readline()
                        if not data or data == b".\r\n" or data == b".\n":
                            break
                    if not data:
                        break
                    counts[0] += 1
                    counts[1] += rcpts
                    rcpts = 0
                    writer.write(b"250 2.0.0 queued\r\n")
                elif verb == b"RSET":
                    rcpts = 0
                    writer.write(b"250 2.0.0 ok\r\n")
                elif verb == b"NOOP":
                    writer.write(b"250 2.0.0 ok\r\n")
                elif verb == b"QUIT":
                    writer.write(b"221 2.0.0 bye\r\n")
                    await writer.drain()
                    break
                elif line.upper().startswith(b"XCOUNT"):
                    writer.write(f"250 {counts[0]} {counts[1]}\r\n".encode())
                else:
                    writer.write(b"502 5.5.2 not implemented\r\n")
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def main():
        server = await asyncio.start_server(session, "127.0.0.1", port, backlog=1024)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def sink_count():
    """Messages the sink has received so far."""
    with socket.create_connection(("127.0.0.1", SINK_PORT), timeout=30) as s:
        f = s.makefile("rb")
        f.readline()
        s.sendall(b"XCOUNT\r\n")
        return int(f.readline().split()[1])


def wait_sink(target, deadline=600):
    """Waits until the sink has received `target` messages; the count reached."""
    end = time.time() + deadline
    while True:
        got = sink_count()
        if got >= target or time.time() > end:
            return got
        time.sleep(0.02)


# --- The clients ----------------------------------------------------------------------------

class Db:
    def __init__(self, url, data_dir):
        self.url, self.path = url, os.path.join(data_dir, "herald.db")

    def run(self, sql):
        if self.url.startswith("postgres"):
            out = subprocess.run(["psql", self.url, "-qAtc", sql], capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit(f"psql failed: {out.stderr}\n{sql}")
            return out.stdout.strip()
        con = sqlite3.connect(self.path, timeout=60)
        try:
            cur = con.execute(sql)
            row = cur.fetchone() if cur.description else None
            con.commit()
            return "" if row is None else str(row[0])
        finally:
            con.close()


def message(tag, g):
    rcpt = f"{tag}-{g}@example.com"
    return rcpt, (
        f"From: Bench <{FROM}>\r\nTo: <{rcpt}>\r\nSubject: {SUBJECT}\r\n"
        f"Message-ID: <{tag}-{g}-{time.time_ns()}@plain-bench.example>\r\n"
        f"MIME-Version: 1.0\r\nContent-Type: text/html; charset=utf-8\r\n\r\n"
        f"{HTML.format(n=g)}\r\n"
    )


def share(n):
    """The message numbers 1..n dealt to CLIENTS clients."""
    return [list(range(1 + c, n + 1, CLIENTS)) for c in range(CLIENTS)]


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

    threads = [threading.Thread(target=worker, args=(part,)) for part in share(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return refused


def http_clients(key, tag, n):
    """Sends n POST /v1/send requests of one recipient over CLIENTS keep-alive clients; the
    refusals."""
    refused = []
    lock = threading.Lock()
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

    def worker(numbers):
        conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=120)
        for g in numbers:
            body = json.dumps({"to": f"{tag}-{g}@example.com", "from": FROM, "subject": SUBJECT,
                               "body": HTML.format(n=g)})
            conn.request("POST", "/v1/send", body=body, headers=headers)
            reply = conn.getresponse()
            text = reply.read()
            if reply.status >= 300:
                with lock:
                    refused.append(f"{reply.status} {text[:200]!r}")
        conn.close()

    threads = [threading.Thread(target=worker, args=(part,)) for part in share(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return refused


def timed(run, n):
    """Runs `run` and waits for the sink to have n more messages; (seconds to the last message
    received, seconds to the clients' last answer, received, refused)."""
    before = sink_count()
    started = time.perf_counter()
    refused = run()
    answered = time.perf_counter() - started
    got = wait_sink(before + n - len(refused)) - before
    return time.perf_counter() - started, answered, got, refused


def hwm(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(l for l in f if l.startswith("VmHWM")).split()[1]) / 1024


def note(refused):
    return f"; {len(refused)} refused: {refused[0]}" if refused else ""


ROWS = []


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
    key, project = init["secretKey"], init["projectId"]
    db.run(f"UPDATE projects SET track_opens = FALSE, track_clicks = FALSE WHERE id = '{project}'")
    print(f"### {name}: {n:,} messages each way, {CLIENTS} concurrent clients")

    took, answered, got, refused = timed(lambda: smtp_clients(SINK_PORT, "ceil", n), n)
    print(f"- ceiling, smtplib straight into the sink: {took:.1f} s, {got:,} received{note(refused)}")
    ROWS.append((name, "ceiling: smtplib → sink (no Herald)", got, took, answered, None))

    env = dict(
        os.environ, HERALD_LOG="warn", HERALD_RATE_LIMIT_PER_MINUTE="100000000",
        HERALD_PLUGINS__TRANSPORT="smtp", HERALD_PLUGINS__SMTP_HOST="127.0.0.1",
        HERALD_PLUGINS__SMTP_PORT=str(SINK_PORT), HERALD_PLUGINS__SMTP_TLS="none",
        HERALD_PLUGINS__SMTP_POOL_SIZE="16", HERALD_SENDING__PER_PROJECT_PER_SECOND="0",
        HERALD_JOBS_CONCURRENCY="32", HERALD_JOBS_POLL_INTERVAL_MS="20",
        HERALD_DOMAINS__ALLOW_UNVERIFIED="true",
        HERALD_SUBMISSION__LISTEN=f"127.0.0.1:{SUBMISSION_PORT}",
        HERALD_SUBMISSION__MAX_CONNECTIONS_PER_IP="0",
        HERALD_SUBMISSION__MESSAGES_PER_IP_PER_MINUTE="0",
    )
    env.pop("HERALD_BIN", None)  # not a setting: the server would warn about it
    server = subprocess.Popen(
        [BIN, "serve", "--listen", f"127.0.0.1:{PORT}", "--data-dir", data, "--database-url", url],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(200):
            try:
                conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=5)
                conn.request("GET", "/ready")
                ok = conn.getresponse().status == 200
                conn.close()
                smtplib.SMTP("127.0.0.1", SUBMISSION_PORT, timeout=5).quit()
                if ok:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        else:
            sys.exit("the server did not get ready in 20 s")

        took, answered, got, refused = timed(lambda: smtp_clients(SUBMISSION_PORT, "sub", n, key), n)
        rss = hwm(server.pid)
        print(f"- SMTP submission → Herald → sink: {took:.1f} s (last 250 at {answered:.1f} s), "
              f"{got:,} received{note(refused)}")
        ROWS.append((name, "SMTP submission → Herald → sink", got, took, answered, rss))

        took, answered, got, refused = timed(lambda: http_clients(key, "api", n), n)
        rss = hwm(server.pid)
        print(f"- POST /v1/send → Herald → sink: {took:.1f} s (last answer at {answered:.1f} s), "
              f"{got:,} received{note(refused)}")
        ROWS.append((name, "POST /v1/send → Herald → sink", got, took, answered, rss))

        sent = db.run(f"SELECT COUNT(*) FROM emails WHERE project_id = '{project}' AND status = 'sent'")
        print(f"- rows: {sent} emails sent (of {2 * n:,})")
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(data, ignore_errors=True)


def with_pg(run):
    db = f"herald_bench_sub_{int(time.time())}"
    try:
        subprocess.run(["psql", f"{PG}/postgres", "-qc", f"CREATE DATABASE {db}"], check=True, capture_output=True)
    except (subprocess.CalledProcessError, FileNotFoundError):
        print("### PostgreSQL: not reachable on 127.0.0.1:5432; skipped")
        return
    try:
        run(f"{PG}/{db}")
    finally:
        subprocess.run(["psql", f"{PG}/postgres", "-qc", f"DROP DATABASE {db}"], capture_output=True)


def table():
    print()
    print("| database | path | messages received | seconds to the last received | messages/s end to end "
          "| clients' last answer at | server peak RSS |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, path, got, took, answered, rss in ROWS:
        mem = "" if rss is None else f"{rss:.0f} MiB"
        print(f"| {name} | {path} | {got:,} | {took:.2f} s | {got / took:,.0f} | {answered:.2f} s | {mem} |")


def main():
    sinkp = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--sink", str(SINK_PORT)])
    try:
        for _ in range(100):
            try:
                sink_count()
                break
            except OSError:
                time.sleep(0.05)
        bench("SQLite", None, N)
        if os.environ.get("BACKEND") != "sqlite":
            with_pg(lambda url: bench("PostgreSQL", url, N))
        table()
    finally:
        sinkp.terminate()
        sinkp.wait()


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--sink":
        sink(int(sys.argv[2]))
    else:
        main()
