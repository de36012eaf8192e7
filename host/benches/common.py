"""What the delivery benchmarks share (`smtp/submission.py`, `transports/run.py`): the binary, a
counting SMTP sink (run as `common.py --sink PORT`, in its own process), a project made by
`herald init`, `herald serve` started and awaited, N `POST /v1/send` over keep-alive clients,
PostgreSQL databases made and dropped, and the server's peak RSS.

Standard library only (Python 3.11).
"""
import asyncio
import http.client
import json
import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
BIN = os.environ.get("HERALD_BIN") or (
    os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")) + "/release/herald"
)
CLIENTS = 32
PG = "postgres://postgres@127.0.0.1:5432"
FROM = "hello@plain-bench.example"
SUBJECT = "Your order"
HTML = "<html><body><p>Hello there,</p><p>Thanks for your order #{n}. " \
       "<a href=\"https://shop.example/orders/{n}\">See it here</a>.</p></body></html>"

# Settings of every benchmark server: no rate limits, 32 delivery batches at once, idle workers
# looking for work every 20 ms, unverified senders allowed (the mail goes unsigned).
SERVE_ENV = dict(
    HERALD_LOG="warn", HERALD_RATE_LIMIT_PER_MINUTE="100000000",
    HERALD_SENDING__PER_PROJECT_PER_SECOND="0",
    HERALD_JOBS_CONCURRENCY="32", HERALD_JOBS_POLL_INTERVAL_MS="20",
    HERALD_DOMAINS__ALLOW_UNVERIFIED="true",
)


def smtp_env(sink_port):
    """The `smtp` transport into the sink on `sink_port`, over a pool of 16 connections."""
    return dict(
        HERALD_PLUGINS__TRANSPORT="smtp", HERALD_PLUGINS__SMTP_HOST="127.0.0.1",
        HERALD_PLUGINS__SMTP_PORT=str(sink_port), HERALD_PLUGINS__SMTP_TLS="none",
        HERALD_PLUGINS__SMTP_POOL_SIZE="16",
    )


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


def spawn(script, args, probe):
    """`script args…` run by this Python in a process of its own, once `probe()` raises no
    OSError (or 5 s have passed)."""
    proc = subprocess.Popen([sys.executable, os.path.abspath(script), *map(str, args)])
    for _ in range(100):
        try:
            probe()
            break
        except OSError:
            time.sleep(0.05)
    return proc


def start_sink(port):
    """The sink on `port` in a process of its own, once it answers."""
    return spawn(__file__, ["--sink", port], lambda: sink_count(port))


def sink_count(port):
    """Messages the sink on `port` has received so far."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        f = s.makefile("rb")
        f.readline()
        s.sendall(b"XCOUNT\r\n")
        return int(f.readline().split()[1])


def wait_count(count, target, deadline=600, stall=None):
    """Waits until `count()` reaches `target` (or `deadline` seconds pass, or, with `stall`, it
    has not grown for that many seconds); the count reached."""
    end = time.time() + deadline
    last, since = None, time.time()
    while True:
        got = count()
        if got >= target or time.time() > end:
            return got
        if got != last:
            last, since = got, time.time()
        elif stall and time.time() - since > stall:
            return got
        time.sleep(0.02)


def timed(run, n, count, stall=None):
    """Runs `run` and waits for `count()` to have grown by n (less the refusals); (seconds to
    the last message received, seconds to the clients' last answer, received, refused)."""
    before = count()
    started = time.perf_counter()
    refused = run()
    answered = time.perf_counter() - started
    got = wait_count(count, before + n - len(refused), stall=stall) - before
    return time.perf_counter() - started, answered, got, refused


# --- The server -----------------------------------------------------------------------------

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


def init(url=None):
    """`herald init` in a new data directory (on SQLite in it when `url` is None), with the
    project's open and click tracking turned off by SQL; (data dir, url, Db, secret key,
    project id)."""
    data = tempfile.mkdtemp()
    url = url or f"sqlite://{os.path.join(data, 'herald.db')}"
    db = Db(url, data)
    made = json.loads(
        subprocess.run(
            [BIN, "init", "--json", "--data-dir", data, "--database-url", url],
            capture_output=True, text=True, check=True,
        ).stdout
    )
    key, project = made["secretKey"], made["projectId"]
    db.run(f"UPDATE projects SET track_opens = FALSE, track_clicks = FALSE WHERE id = '{project}'")
    return data, url, db, key, project


def serve(port, data, url, settings, ready=None):
    """`herald serve` on 127.0.0.1:`port` with SERVE_ENV and `settings` over the environment,
    once `/ready` answers 200 and `ready()` (if given) raises no OSError. Its stderr goes to
    `<data>/serve.log`, shown if it stops or does not get ready in 20 s."""
    env = dict(os.environ, **SERVE_ENV, **settings)
    env.pop("HERALD_BIN", None)  # not a setting: the server would warn about it
    log_path = os.path.join(data, "serve.log")
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            [BIN, "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", data, "--database-url", url],
            env=env, stdout=subprocess.DEVNULL, stderr=log,
        )
    for _ in range(200):
        if server.poll() is not None:
            break
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/ready")
            ok = conn.getresponse().status == 200
            conn.close()
            if ready:
                ready()
            if ok:
                return server
        except OSError:
            pass
        time.sleep(0.1)
    why = f"stopped (exit {server.returncode})" if server.poll() is not None else \
        "did not get ready in 20 s"
    stop(server)
    with open(log_path, errors="replace") as f:
        tail = f.read()[-3000:]
    sys.exit(f"the server {why}:\n{tail}")


def stop(server):
    if server is not None:
        server.terminate()
        server.wait()


def hwm(pid):
    """The process's peak RSS in MiB."""
    with open(f"/proc/{pid}/status") as f:
        return int(next(l for l in f if l.startswith("VmHWM")).split()[1]) / 1024


def with_pg(run, name):
    """`run(url)` on a new PostgreSQL database `herald_bench_<name>_…` on 127.0.0.1:5432, dropped
    after; says so and skips when PostgreSQL is not reachable."""
    db = f"herald_bench_{name}_{int(time.time())}"
    try:
        subprocess.run(["psql", f"{PG}/postgres", "-qc", f"CREATE DATABASE {db}"], check=True, capture_output=True)
    except (subprocess.CalledProcessError, FileNotFoundError):
        print("### PostgreSQL: not reachable on 127.0.0.1:5432; skipped")
        return
    try:
        run(f"{PG}/{db}")
    finally:
        subprocess.run(["psql", f"{PG}/postgres", "-qc", f"DROP DATABASE {db}"], capture_output=True)


# --- The clients ----------------------------------------------------------------------------

def share(n):
    """The message numbers 1..n dealt to CLIENTS clients."""
    return [list(range(1 + c, n + 1, CLIENTS)) for c in range(CLIENTS)]


def http_clients(port, key, tag, n):
    """Sends n POST /v1/send requests of one recipient over CLIENTS keep-alive clients; the
    refusals."""
    refused = []
    lock = threading.Lock()
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

    def worker(numbers):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
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

    in_threads(worker, n)
    return refused


def in_threads(worker, n):
    """`worker(numbers)` on CLIENTS threads at once, the message numbers 1..n dealt to them."""
    threads = [threading.Thread(target=worker, args=(part,)) for part in share(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def note(refused):
    return f"; {len(refused)} refused: {refused[0]}" if refused else ""


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--sink":
        sink(int(sys.argv[2]))
    else:
        sys.exit("usage: common.py --sink PORT (the benchmarks start it themselves)")
