#!/usr/bin/env python3
"""Segments at scale, on SQLite and PostgreSQL, against a release build.

For each database: `herald init` makes a project, N contacts with varied data (plan, score,
country, a signup date) and events (`login` for half of them within the last 60 days, `purchase`
for a tenth) are written by SQL straight into the fresh database (their outbox rows are dropped:
they are history, not news), then `herald serve` runs on it and the script measures, through HTTP:

1. Count and first page of a 3-condition dynamic segment (`data.plan` equals `pro`, `event.login`
   triggeredWithin 30 days, `subscribed` true): `GET /segments/:id/contacts?page=1&pageSize=20`
   answers both. Median of 5 after one warm-up. Beside it, the ceiling of the same run: a bare
   `SELECT COUNT(*)` of the project's contacts, timed in the database's own client.
2. Compute of the same segment tracked, from empty, then again after 1% of the contacts changed
   plan (by SQL). While each compute runs, a probe writes (`POST /v1/track` of another contact)
   every 20 ms; the longest probe is the longest the writer was held (SQLite) plus a request.
3. The live path: M events tracked by 8 client threads, timed until the outbox is drained, with
   no tracked segment and then with 10 tracked segments, twice: while the contacts enter (each
   event then also writes entry events, which the outbox dispatches in turn) and once they are
   members (nothing changes: the re-evaluation alone); the added cost per `/v1/track` is the
   difference per event, in wall time and in CPU seconds of the server (and of PostgreSQL's
   processes). Beside it, what the entering burst took beyond the settled one per entry event
   it wrote, as a share of a tracked event's cost with no tracked segment.

With `HISTORY=H`, long histories instead: every contact also gets H `visit` events spread over
60 days, and the script measures (1) count and first page of `event.visit` triggeredWithin 7 days
and `subscribed`, beside a bare `SELECT COUNT(*)` of the project's events, and (3) the live path
with 10 tracked segments on `event.visit` (triggeredWithin 3 to 30 days, and `data.score`), the
bursts tracking `visit` (so each re-evaluation reads a contact with about H events of the name).

Usage: host/benches/segments/run.py [N, default 1000000] [M, default 5000]
(`ONLY=sqlite` or `ONLY=postgres` runs one database; `LIVE_ONLY=1` runs part 3 alone,
`COUNT_ONLY=1` part 1 alone, `SEARCH_ONLY=1` the contact search (`GET /contacts?search=`) alone,
`DELETES_ONLY=1` the long deletes (`DELETE /events/login`, `DELETE /contacts/fields/data.country`,
then the project's reset), each timed beside a probe write of another project
every 20 ms (issue #74: on SQLite another tenant's write waits at most 200 ms); `POLL_MS` sets the server's job and outbox poll interval, 20 ms
unless given, so that a burst's drain is not rounded up to the default 500 ms.)
Needs a release build (cargo build --release; CARGO_TARGET_DIR is honoured), python3, sqlite3's
module, psql, and PostgreSQL on 127.0.0.1:5432 for the second half (skipped with a note when
unreachable). HERALD_BIN runs another binary (a debug build, for a quick check of the script).
"""
import glob
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.abspath(__file__)) + "/../../.."
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from keepalive import Api  # noqa: E402
BIN = os.environ.get("HERALD_BIN") or (
    os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")) + "/release/herald"
)
PORT = 18292
N = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
M = int(sys.argv[2]) if len(sys.argv) > 2 else 5000
PG = "postgres://postgres@127.0.0.1:5432"
HISTORY = int(os.environ.get("HISTORY") or 0)
DAY = 86_400_000


call = Api(PORT)


class Db:
    """The database under test, for loading and for the ceiling."""

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
            cur = con.executescript(sql) if ";" in sql.strip().rstrip(";") else con.execute(sql)
            row = cur.fetchone() if cur.description else None
            con.commit()
            return "" if row is None else str(row[0])
        finally:
            con.close()

    def timed(self, sql, runs=5):
        """Median seconds of `sql` (after one warm-up), in the database's own client."""
        if self.url.startswith("postgres"):
            script = "\\timing on\n" + (sql + ";\n") * (runs + 1)
            out = subprocess.run(["psql", self.url, "-qAt"], input=script, capture_output=True, text=True, check=True)
            ms = [float(l.split()[1]) for l in out.stdout.splitlines() if l.startswith("Time:")]
            return statistics.median(ms[1:]) / 1000
        con = sqlite3.connect(self.path)
        try:
            con.execute(sql).fetchall()
            times = []
            for _ in range(runs):
                t = time.perf_counter()
                con.execute(sql).fetchall()
                times.append(time.perf_counter() - t)
            return statistics.median(times)
        finally:
            con.close()


def load(db, project, now):
    """N contacts and their events, by SQL, in the fresh database."""
    pg = db.url.startswith("postgres")
    hexid = "lpad(to_hex(g), 32, '0')" if pg else "printf('%032x', g)"
    obj = "jsonb_build_object" if pg else "json_object"
    iso = (
        "to_char(to_timestamp(({now} - (g % 365) * {day}) / 1000.0) AT TIME ZONE 'UTC', "
        "'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')"
        if pg
        else "strftime('%Y-%m-%dT%H:%M:%SZ', ({now} - (g % 365) * {day}) / 1000, 'unixepoch')"
    ).format(now=now, day=DAY)
    series = (
        f"generate_series(1::bigint, {N}) AS s(g)"
        if pg
        else f"(WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < {N}) SELECT g FROM s)"
    )
    plans = "(ARRAY['free', 'pro', 'team'])[1 + g % 3]" if pg else "CASE g % 3 WHEN 0 THEN 'free' WHEN 1 THEN 'pro' ELSE 'team' END"
    countries = "(ARRAY['de', 'fr', 'us', 'jp', 'br'])[1 + g % 5]" if pg else "CASE g % 5 WHEN 0 THEN 'de' WHEN 1 THEN 'fr' WHEN 2 THEN 'us' WHEN 3 THEN 'jp' ELSE 'br' END"
    db.run(
        f"INSERT INTO contacts (id, project_id, email, subscribed, data, version, created_at, updated_at) "
        f"SELECT 'cnt_' || {hexid}, '{project}', 'c' || g || '@example.com', (g % 10) <> 0, "
        f"{obj}('plan', {plans}, 'score', g % 100, 'country', {countries}, 'signedUpAt', {iso}), "
        f"0, {now} - g * 1000, {now} - g * 500 FROM {series}"
    )
    # Event ids: 31 hex digits of the contact and one letter of the name.
    event_hex = "lpad(to_hex(g), 31, '0')" if pg else "printf('%031x', g)"
    for name, letter, every, spread in [("login", "a", 2, 60), ("purchase", "b", 10, 200)]:
        db.run(
            f"INSERT INTO events (id, project_id, contact_id, name, data, created_at) "
            f"SELECT 'evt_' || {event_hex} || '{letter}', '{project}', 'cnt_' || {hexid}, '{name}', "
            f"{obj}(), {now} - (g % {spread}) * {DAY} - g FROM {series} WHERE g % {every} = 0"
        )
    if HISTORY:
        pairs = (
            f"generate_series(1::bigint, {N}) AS s(g), generate_series(1::bigint, {HISTORY}) AS h(k)"
            if pg
            else f"(WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < {N}) SELECT g FROM s), "
            f"(WITH RECURSIVE h(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM h WHERE k < {HISTORY}) SELECT k FROM h)"
        )
        visit_hex = "lpad(to_hex(g * 100000 + k), 31, '0')" if pg else "printf('%031x', g * 100000 + k)"
        db.run(
            f"INSERT INTO events (id, project_id, contact_id, name, data, created_at) "
            f"SELECT 'evt_' || {visit_hex} || 'c', '{project}', 'cnt_' || {hexid}, 'visit', "
            f"{obj}(), {now} - ((g * 7 + k * 13) % 60) * {DAY} - k FROM {pairs}"
        )
    db.run("DELETE FROM event_outbox")
    db.run("ANALYZE")


def median_http(fn, runs=5):
    fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def compute_with_probe(key, segment, probe_email):
    """Seconds of a compute, and the longest probe write meanwhile."""
    stop, longest = threading.Event(), [0.0]

    def probe():
        while not stop.is_set():
            t = time.perf_counter()
            call("POST", "/v1/track", key, {"email": probe_email, "event": "probe"})
            longest[0] = max(longest[0], time.perf_counter() - t)
            time.sleep(0.02)

    th = threading.Thread(target=probe)
    th.start()
    t = time.perf_counter()
    out = call("POST", f"/segments/{segment}/compute", key, {})
    took = time.perf_counter() - t
    stop.set()
    th.join()
    return took, longest[0], out


def cpu_seconds(server, pg):
    """CPU seconds spent so far by the server and, on PostgreSQL, by the postmaster and its
    children (live ones, and exited ones through the postmaster's own counts; the backends of
    this script's own `psql` polls of the outbox are among them, a few milliseconds each)."""
    tick = os.sysconf("SC_CLK_TCK")

    def fields(pid):
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        return stat[stat.rindex(")") + 2:].split()

    def own(pid):
        try:
            f = fields(pid)
            return int(f[11]) + int(f[12])
        except (OSError, ValueError):
            return 0

    total = own(server)
    if pg:
        for path in glob.glob("/var/run/postgresql/*.pid")[:1]:
            with open(path) as f:
                pm = int(f.readline())
            f = fields(pm)
            total += int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])
            kids = subprocess.run(["pgrep", "-P", str(pm)], capture_output=True, text=True).stdout.split()
            total += sum(own(int(k)) for k in kids)
    return total / tick


def track_burst(db, key, tag, server):
    """Seconds to track M events with 8 threads and drain the outbox, and the CPU seconds the
    server (and PostgreSQL) spent meanwhile."""
    pg = db.url.startswith("postgres")
    cpu = cpu_seconds(server, pg)
    t = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: call("POST", "/v1/track", key, {"email": f"c{1 + i * 97 % N}@example.com", "event": tag}), range(M)))
    tracked = time.perf_counter() - t
    while int(db.run("SELECT COUNT(*) FROM event_outbox") or 0) > 0:
        time.sleep(0.05)
    took = time.perf_counter() - t
    cpu = cpu_seconds(server, pg) - cpu
    print(f"  {tag}: tracked in {tracked:.2f} s, outbox drained {took - tracked:.2f} s later; "
          f"CPU {cpu / M * 1000:.3f} ms an event")
    return took, cpu


def live_path(db, key, project, server):
    """Part 3: /v1/track bursts with 0, then 10 tracked segments (entering, then settled)."""
    entry_count = f"SELECT COUNT(*) FROM events WHERE project_id = '{project}' AND name LIKE 'segment.%.entry'"
    before = int(db.run(entry_count) or 0)
    base, base_cpu = track_burst(db, key, "visit" if HISTORY else "burst0", server)
    for i in range(10):
        event = (
            {"field": "event.visit", "operator": "triggeredWithin", "value": 3 * (i + 1), "unit": "days"}
            if HISTORY
            else {"field": f"event.burst{1 + i % 2}", "operator": "triggered"}
        )
        c = {"logic": "AND", "groups": [{"filters": [
            {"field": "data.score", "operator": "greaterThan", "value": i * 10}, event]}]}
        call("POST", "/segments", key, {"name": f"Tracked {i}", "type": "DYNAMIC", "trackMembership": True, "condition": c})
    tag = "visit" if HISTORY else "burst1"
    tracked, tracked_cpu = track_burst(db, key, tag, server)
    entries = int(db.run(entry_count) or 0) - before
    # The same events again: the contacts are members already, so nothing changes and the
    # figure is the re-evaluation alone (the usual case once membership has settled).
    steady, steady_cpu = track_burst(db, key, tag, server)
    entries_after = int(db.run(entry_count) or 0) - before
    print(f"/v1/track x {M:,} until the outbox drained ({entries:,} entry events while contacts enter, "
          f"{entries_after - entries:,} more once they are members), per tracked event:")
    # In wall time, and in CPU seconds of the server (and PostgreSQL's processes), which leave
    # out the client's share of the cores. What the entering burst took beyond the settled one
    # (re-evaluation is in both) is the entry events' cost, given per entry event beside a
    # tracked event's with no tracked segment.
    for label, none, entering, settled in [("time", base, tracked, steady), ("CPU", base_cpu, tracked_cpu, steady_cpu)]:
        line = (f"  {label}: {none / M * 1000:.3f} ms with no tracked segment; with 10: "
                f"{entering / M * 1000:.3f} ms while contacts enter ({(entering - none) / none * 100:+.0f}%), "
                f"{settled / M * 1000:.3f} ms once they are members ({(settled - none) / none * 100:+.0f}%)")
        if entries:
            per_entry = (entering - settled) / entries
            line += f"; each entry event {per_entry * 1000:.3f} ms, {per_entry / (none / M) * 100:.0f}% of a tracked event"
        print(line)


def search(db, key, project):
    """`GET /contacts?search=` for 200 parts of addresses (`c<number>@`, numbers spread over the
    contacts), one at a time after 20 warm-ups: p50 and p99, beside the ceiling of the same run."""
    import random
    rng = random.Random(7)
    terms = [f"c{rng.randrange(1, N + 1)}@" for _ in range(220)]
    times = []
    for i, term in enumerate(terms):
        t = time.perf_counter()
        page = call("GET", f"/contacts?search={urllib.parse.quote(term)}", key)
        if i >= 20:
            times.append(time.perf_counter() - t)
        assert any(c["email"].startswith(term) for c in page["data"]), (term, page)
    times.sort()
    ceiling = db.timed(f"SELECT COUNT(*) FROM contacts WHERE project_id = '{project}'")
    print(f"search of 200 address parts: p50 {times[len(times) // 2] * 1000:.1f} ms, "
          f"p99 {times[int(len(times) * 0.99) - 1] * 1000:.1f} ms; "
          f"ceiling SELECT COUNT(*) of the project's contacts: {ceiling * 1000:.0f} ms")


def deletes(init, url):
    """The long deletes of a project, each beside another project's probe writes every 20 ms."""
    import http.cookiejar

    def session(path, method, body=None, jar=None):
        jar = jar if jar is not None else http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        r = urllib.request.Request(f"http://127.0.0.1:{PORT}{path}", method=method,
                                   data=None if body is None else json.dumps(body).encode())
        r.add_header("content-type", "application/json")
        text = opener.open(r, timeout=600).read()
        return (json.loads(text) if text else None), jar

    _, owner = session("/auth/login", "POST", {"email": init["email"], "password": init["password"]})
    other, _ = session("/users/@me/projects", "POST", {"name": "other tenant"}, owner)
    other_key = (other.get("data") or other)["secretKey"]
    key, project = init["secretKey"], init["projectId"]
    stop, longest = threading.Event(), [0.0]

    def probe():
        while not stop.is_set():
            t = time.perf_counter()
            call("POST", "/v1/track", other_key, {"email": "probe@example.com", "event": "probe"})
            longest[0] = max(longest[0], time.perf_counter() - t)
            time.sleep(0.02)

    for label, run in [
        ("DELETE /events/login (500,000 events)", lambda: call("DELETE", "/events/login", key)),
        ("DELETE /contacts/fields/data.country (1,000,000 contacts)",
         lambda: call("DELETE", "/contacts/fields/data.country", key)),
        ("project reset (1,000,000 contacts, 100,000 events)",
         lambda: session(f"/users/@me/projects/{project}/reset", "POST", {}, owner)),
    ]:
        longest[0] = 0.0
        stop.clear()
        th = threading.Thread(target=probe)
        th.start()
        t = time.perf_counter()
        run()
        took = time.perf_counter() - t
        time.sleep(0.1)
        stop.set()
        th.join()
        print(f"{label}: {took:.1f} s; another project's longest probe write meanwhile: {longest[0] * 1000:.0f} ms")


def bench(label, url, work):
    print(f"### {label}: {N:,} contacts")
    call.reset()
    init = json.loads(subprocess.run([BIN, "init", "--json", "--database-url", url, "--data-dir", work], capture_output=True, text=True, check=True).stdout)
    key = init["secretKey"]
    db = Db(url, work)
    project = db.run("SELECT id FROM projects")
    now = int(time.time() * 1000)
    t = time.perf_counter()
    load(db, project, now)
    print(f"load by SQL: {time.perf_counter() - t:.1f} s")
    env = dict(os.environ, HERALD_LOG="warn", HERALD_RATE_LIMIT_PER_MINUTE="100000000", HERALD_JOBS_POLL_INTERVAL_MS=os.environ.get("POLL_MS", "20"))
    server = subprocess.Popen([BIN, "serve", "--listen", f"127.0.0.1:{PORT}", "--database-url", url, "--data-dir", work], env=env)
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{PORT}/ready", timeout=1)
                break
            except Exception:
                time.sleep(0.1)
        if os.environ.get("LIVE_ONLY"):
            live_path(db, key, project, server.pid)
            return
        if os.environ.get("SEARCH_ONLY"):
            search(db, key, project)
            return
        if os.environ.get("DELETES_ONLY"):
            deletes(init, url)
            return
        condition = {"logic": "AND", "groups": [{"filters": [
            {"field": "data.plan", "operator": "equals", "value": "pro"},
            {"field": "event.login", "operator": "triggeredWithin", "value": 30, "unit": "days"},
            {"field": "subscribed", "operator": "equals", "value": True}]}]}
        if HISTORY:
            condition = {"logic": "AND", "groups": [{"filters": [
                {"field": "event.visit", "operator": "triggeredWithin", "value": 7, "unit": "days"},
                {"field": "subscribed", "operator": "equals", "value": True}]}]}
        seg = call("POST", "/segments", key, {"name": "Active pro", "type": "DYNAMIC", "condition": condition})["id"]
        page = {}

        def first_page():
            page.update(call("GET", f"/segments/{seg}/contacts?page=1&pageSize=20", key))

        took = median_http(first_page)
        table = "events" if HISTORY else "contacts"
        ceiling = db.timed(f"SELECT COUNT(*) FROM {table} WHERE project_id = '{project}'")
        print(f"count + first page: {took * 1000:.0f} ms (total {page['total']:,}, page {len(page['data'])}); "
              f"ceiling SELECT COUNT(*) of the project's {table}: {ceiling * 1000:.0f} ms")
        if os.environ.get("COUNT_ONLY"):
            return
        if HISTORY:
            live_path(db, key, project, server.pid)
            return

        call("PATCH", f"/segments/{seg}", key, {"trackMembership": True})
        took, held, out = compute_with_probe(key, seg, "probe@example.com")
        print(f"compute from empty: {took:.1f} s ({out}); longest probe write meanwhile: {held * 1000:.0f} ms")
        if url.startswith("postgres"):
            freed = "jsonb_set(data, '{plan}', '\"free\"')"
        else:
            freed = "json_set(data, '$.plan', 'free')"
        db.run(f"UPDATE contacts SET data = {freed}, updated_at = {now} WHERE project_id = '{project}' "
               f"AND id IN (SELECT id FROM contacts WHERE project_id = '{project}' ORDER BY id LIMIT {N // 100})")
        took, held, out = compute_with_probe(key, seg, "probe@example.com")
        print(f"compute after 1% changed: {took:.1f} s ({out}); longest probe write meanwhile: {held * 1000:.0f} ms")
        call("PATCH", f"/segments/{seg}", key, {"trackMembership": False})

        live_path(db, key, project, server.pid)
    finally:
        if server.poll() is not None:
            print(f"the server exited by itself: status {server.returncode}")
        server.terminate()
        server.wait()


def main():
    if not os.access(BIN, os.X_OK):
        sys.exit(f"{BIN} is missing: cargo build --release")
    only = os.environ.get("ONLY", "")
    if only not in ("", "sqlite", "postgres"):
        sys.exit("ONLY is sqlite or postgres")
    if only != "postgres":
        work = tempfile.mkdtemp()
        try:
            bench("SQLite", f"sqlite://{work}/herald.db", work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    if only == "sqlite":
        return
    name = f"h_bench_segments_{int(time.time())}"
    if subprocess.run(["psql", f"{PG}/postgres", "-qc", f"CREATE DATABASE {name}"], capture_output=True).returncode != 0:
        print("### PostgreSQL: unreachable on 127.0.0.1:5432, skipped")
        return
    work = tempfile.mkdtemp()
    try:
        bench("PostgreSQL", f"{PG}/{name}", work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        subprocess.run(["psql", f"{PG}/postgres", "-qc", f"DROP DATABASE {name}"], capture_output=True)


if __name__ == "__main__":
    main()
