#!/usr/bin/env python3
"""The workflow engine end to end, on SQLite and PostgreSQL, against a release build.

For each database: a fresh `herald serve` (transport `outbox`, the default 4 job workers, or JOBS)
with one enabled 5-step workflow (CONDITION -> UPDATE_CONTACT -> SEND_EMAIL -> DELAY 0 -> EXIT) triggered by
`bench`. Then:

1. Throughput: N events of N new contacts are tracked as fast as 16 client threads can; the run
   ends when every execution is EXITED. Step runs per second = 5 N / (last finish - first
   track). Beside it, the ceiling measured in the same run: /v1/track alone (the same tracking
   into an event no workflow uses).
2. Latency: events tracked at a paced RATE per second for SECONDS seconds (by wrk with
   `paced_track.lua`, which costs about 6 % of a core where a Python client took 30 %);
   trigger-to-first-step latency = the first step run's finish time minus the
   trigger event's time, p50 and p99, read from the database afterwards.
3. Memory: the server's peak RSS (VmHWM) at the end.
Rows are counted after each run (executions EXITED, step runs, emails) so the figures are real.

Before the measured phases, WARM executions (default 1000; `WARM=0` for none) run through the
workflow and, on PostgreSQL, the database is analyzed (`ANALYZE`), as a deployment that has been
running is: its tables have rows and statistics. Without it, PostgreSQL plans each prepared
statement of the server's connections while the tables are still empty, and keeps those plans
until an `ANALYZE` replaces them, which autovacuum does within about a minute of a table's growth
in a default PostgreSQL, but never on a server with `autovacuum = off` (this development
machine's PostgreSQL is configured so for its CI): the re-entry check then scanned the whole
executions table on every start.

Usage: host/benches/workflows/run.py [N, default 10000] [RATE, default 1000] [SECONDS, default 10]
(`ONLY=sqlite` or `ONLY=postgres` runs one database; HERALD_BIN runs another binary, e.g. an
earlier commit's build beside this one.)
Needs a release build (cargo build --release), wrk (apt-get install wrk), and PostgreSQL on
127.0.0.1:5432 for the second half (skipped with a note when unreachable).
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = HERE + "/../../.."
sys.path.insert(0, os.path.join(HERE, ".."))
from keepalive import Api  # noqa: E402
BIN = os.environ.get("HERALD_BIN") or (
    os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")) + "/release/herald"
)
PORT = 18291
BASE = f"http://127.0.0.1:{PORT}"
N = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
RATE = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
SECONDS = int(sys.argv[3]) if len(sys.argv) > 3 else 10
WARM = int(os.environ.get("WARM", "1000"))
JOBS = os.environ.get("JOBS")  # job workers; unset: the server's default (4)


call = Api(PORT, timeout=60)


def query(url, data_dir, sql):
    """One value from the database."""
    if url:
        out = subprocess.run(["psql", url, "-Atc", sql], capture_output=True, text=True, check=True)
        return out.stdout.strip()
    import sqlite3

    con = sqlite3.connect(os.path.join(data_dir, "herald.db"))
    try:
        return str(con.execute(sql).fetchone()[0])
    finally:
        con.close()


def rows(url, data_dir, sql):
    if url:
        out = subprocess.run(["psql", url, "-Atc", sql], capture_output=True, text=True, check=True)
        return [float(x) for x in out.stdout.split()]
    import sqlite3

    con = sqlite3.connect(os.path.join(data_dir, "herald.db"))
    try:
        return [float(r[0]) for r in con.execute(sql).fetchall()]
    finally:
        con.close()


def track_all(key, emails, event, threads=16):
    def one(email):
        call("POST", "/v1/track", key, {"email": email, "event": event})

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, emails))


def paced(key, prefix, event, rate, seconds):
    """Tracks `event` for new contacts `<prefix><k>@example.com` at `rate` per second for
    `seconds`, with wrk and `paced_track.lua` (each request at its slot, or at once if behind).
    Paced from Python threads, 1,000 requests a second took about 30 % of a core from the server
    it measures, on the same 2 cores; wrk takes about 6 %. Answers wrk's summary line."""
    env = dict(os.environ, HERALD_BENCH_KEY=key, PACED_RATE=str(rate), PACED_PREFIX=prefix,
               PACED_EVENT=event)
    out = subprocess.run(
        ["wrk", "-t1", "-c32", f"-d{seconds}s", "-s", os.path.join(HERE, "paced_track.lua"), BASE],
        env=env, capture_output=True, text=True, check=True,
    ).stdout
    return next(line for line in out.splitlines() if line.startswith("paced:"))


def exited(key, wf):
    page = call("GET", f"/workflows/{wf}/executions?status=EXITED&limit=1", key)
    return page["total"]


def wait_exited(key, wf, n, limit=600):
    deadline = time.time() + limit
    while exited(key, wf) < n:
        if time.time() > deadline:
            raise SystemExit(f"only {exited(key, wf)} of {n} executions exited")
        # Each poll counts the executions (20-70 ms of PostgreSQL's time at 20,000): every
        # 50 ms it took a sixth of the database's time from the engine it measures.
        time.sleep(0.25)
    return time.perf_counter()


def bench(name, url):
    """`url` None: SQLite in the data directory."""
    call.reset()  # a connection to the previous server
    data = tempfile.mkdtemp()
    db_args = ["--database-url", url] if url else []
    try:
        init = json.loads(
            subprocess.run(
                [BIN, "init", "--json", "--data-dir", data] + db_args,
                capture_output=True, text=True, check=True,
            ).stdout
        )
        key = init["secretKey"]
        env = dict(os.environ, HERALD_LOG="warn", HERALD_RATE_LIMIT_PER_MINUTE="100000000",
                   HERALD_JOBS_POLL_INTERVAL_MS="20",
                   HERALD_DOMAINS__ALLOW_UNVERIFIED="true",
                   HERALD_SENDING__PER_PROJECT_PER_SECOND="0")
        if JOBS:
            env["HERALD_JOBS_CONCURRENCY"] = JOBS
        server = subprocess.Popen(
            [BIN, "serve", "--listen", f"127.0.0.1:{PORT}", "--data-dir", data] + db_args,
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        try:
            for _ in range(100):
                try:
                    urllib.request.urlopen(BASE + "/ready", timeout=1)
                    break
                except OSError:
                    time.sleep(0.1)
            tpl = call("POST", "/templates", key, {
                "name": "bench", "type": "TRANSACTIONAL", "subject": "Hi {{plan}}",
                "body": "<p>Hello {{email}}, plan {{plan ?? \"none\"}}.</p>", "from": "bench@acme.test"})["id"]
            wf = call("POST", "/workflows", key, {"name": "bench", "triggerConfig": {"eventName": "bench"}})["id"]
            steps = [
                ("CONDITION", {"filter": {"logic": "AND", "groups": [{"filters": [
                    {"field": "subscribed", "operator": "equals", "value": True}]}]}}),
                ("UPDATE_CONTACT", {"data": {"plan": "pro"}}),
                ("SEND_EMAIL", {"templateId": tpl}),
                ("DELAY", {"amount": 0, "unit": "minutes"}),
                ("EXIT", {"reason": "done"}),
            ]
            ids = [call("POST", f"/workflows/{wf}/steps", key, {"type": t, "config": c})["id"] for t, c in steps]
            for i in range(len(ids) - 1):
                link = {"fromStepId": ids[i], "toStepId": ids[i + 1]}
                if i == 0:
                    link["branch"] = "yes"
                call("POST", f"/workflows/{wf}/transitions", key, link)
            call("PATCH", f"/workflows/{wf}", key, {"enabled": True})

            if WARM:
                track_all(key, [f"w{i}@example.com" for i in range(WARM)], "bench")
                wait_exited(key, wf, WARM)
                if url:
                    subprocess.run(["psql", url, "-qc", "ANALYZE"], check=True)

            print(f"### {name}")
            # The ceiling: tracking alone, into an event no workflow uses.
            began = time.perf_counter()
            track_all(key, [f"floor{i}@example.com" for i in range(N)], "unused")
            floor = N / (time.perf_counter() - began)
            print(f"- /v1/track alone (ceiling): {floor:,.0f} events/s ({N} events, 16 client threads)")

            began = time.perf_counter()
            track_all(key, [f"c{i}@example.com" for i in range(N)], "bench")
            tracked = time.perf_counter() - began
            done = wait_exited(key, wf, WARM + N)
            total = done - began
            runs = int(query(url, data, "SELECT COUNT(*) FROM workflow_step_runs WHERE status = 'COMPLETED'")) - 5 * WARM
            print(f"- {N} executions x 5 steps: {5 * N / total:,.0f} step runs/s end to end "
                  f"({total:.1f} s; tracking took {tracked:.1f} s, {N / tracked:,.0f} events/s); "
                  f"rows: {exited(key, wf) - WARM} executions EXITED, {runs} step runs COMPLETED, "
                  f"{int(query(url, data, 'SELECT COUNT(*) FROM emails')) - WARM} emails "
                  f"(beyond the {WARM} warm-up executions)")

            summary = paced(key, "p", "bench", RATE, SECONDS)
            time.sleep(0.5)  # the requests in flight when wrk stopped
            count = int(query(url, data, "SELECT COUNT(*) FROM contacts WHERE email LIKE 'p%@example.com'"))
            wait_exited(key, wf, WARM + N + count)
            lat = sorted(rows(url, data, (
                "SELECT r.finished_at - ev.created_at FROM workflow_step_runs r "
                "JOIN workflow_executions x ON x.id = r.execution_id "
                "JOIN events ev ON ev.id = x.trigger_event_id "
                "WHERE r.step_type = 'CONDITION' AND x.contact_id IN "
                "(SELECT id FROM contacts WHERE email LIKE 'p%@example.com')")))
            p50 = statistics.median(lat)
            p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
            print(f"- trigger to first step at {count / SECONDS:,.0f} events/s taken of {RATE:,} offered ({summary}): "
                  f"p50 {p50:.0f} ms, p99 {p99:.0f} ms, max {lat[-1]:.0f} ms ({len(lat)} executions)")
            # Where that time goes: from the event to its execution's start (the outbox's
            # dispatch and the trigger consumer), the rest being the step job's wait and run.
            started = sorted(rows(url, data, (
                "SELECT x.created_at - ev.created_at FROM workflow_executions x "
                "JOIN events ev ON ev.id = x.trigger_event_id "
                "WHERE x.contact_id IN (SELECT id FROM contacts WHERE email LIKE 'p%@example.com')")))
            print(f"- of which trigger to execution start: p50 {statistics.median(started):.0f} ms, "
                  f"p99 {started[min(len(started) - 1, int(len(started) * 0.99))]:.0f} ms")
            whole = sorted(rows(url, data, (
                "SELECT x.finished_at - e.created_at FROM workflow_executions x "
                "JOIN events e ON e.id = x.trigger_event_id "
                "WHERE x.contact_id IN (SELECT id FROM contacts WHERE email LIKE 'p%@example.com')")))
            print(f"- trigger to last step (EXIT) meanwhile: p50 {statistics.median(whole):.0f} ms, "
                  f"p99 {whole[min(len(whole) - 1, int(len(whole) * 0.99))]:.0f} ms, max {whole[-1]:.0f} ms")
            with open(f"/proc/{server.pid}/status") as f:
                hwm = next(l for l in f if l.startswith("VmHWM")).split()[1]
            print(f"- peak RSS: {int(hwm) / 1024:.0f} MiB after {WARM + N + count} executions "
                  f"({query(url, data, 'SELECT COUNT(*) FROM workflow_step_runs')} step runs)")
        finally:
            server.terminate()
            server.wait()
    finally:
        shutil.rmtree(data, ignore_errors=True)


def main():
    only = os.environ.get("ONLY", "")
    if only in ("", "sqlite"):
        bench("SQLite", None)
    if only == "sqlite":
        return
    db = f"herald_bench_wf_{int(time.time())}"
    base = "postgres://postgres@127.0.0.1:5432"
    try:
        subprocess.run(["psql", f"{base}/postgres", "-qc", f"CREATE DATABASE {db}"], check=True,
                       capture_output=True)
    except (subprocess.CalledProcessError, FileNotFoundError):
        print("### PostgreSQL: not reachable on 127.0.0.1:5432; skipped")
        return
    try:
        bench("PostgreSQL", f"{base}/{db}")
    finally:
        subprocess.run(["psql", f"{base}/postgres", "-qc", f"DROP DATABASE {db}"], capture_output=True)


if __name__ == "__main__":
    main()
