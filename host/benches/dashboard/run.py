#!/usr/bin/env python3
"""The dashboard's pages at scale (issue #79): every API call a page makes when it opens, at N
contacts, on SQLite and PostgreSQL, against a release build. The aim: each under 200 ms.

For each database: `herald init` makes a project; N contacts with data and their `login` and
`purchase` events are written by SQL as `segments/run.py` writes them (its `load`, imported),
then about N / 100 suppressions and the event names by SQL. With `herald serve` running (the
`smtp` transport into a counting sink on loopback), the rest a project has is made through the
API: a topic, three templates, four dynamic segments and a static one of 500 members, a domain,
a sent campaign to the segment `data.score` under 10 (the subscribed among a tenth of the
contacts, each with its email), a draft campaign, an enabled workflow (send, wait 3 days, exit) that 2,000 contacts
entered through `POST /v1/track` (2,000 more emails, executions waiting) and a disabled one.

Then, signed in as the dashboard is (session cookie and `X-Project-Id`), each call the pages
make (web/src/pages/**), with `GET /contacts/{id}/emails`, `GET /contacts/{id}/executions` and
`POST /segments/preview` (the contact history and the filter builder's count), runs WARM times, then RUNS times one after the other on one kept-alive
connection: p50 and p99 (nearest rank) in a markdown table, per page, beside the ceiling of the
same run: a bare `SELECT COUNT(*)` of the project's contacts in the database's own client. The
contact page is that of `c2@example.com` (`login` events, the campaign's email, the workflow's
email and execution).

Usage: host/benches/dashboard/run.py [N, default 1000000]
(`ONLY=sqlite` or `ONLY=postgres` runs one database; `RUNS` (default 50) and `WARM` (default 5)
set the calls a row.) Needs a release build (`cargo build --release -p herald`;
CARGO_TARGET_DIR is honoured), python3, psql and PostgreSQL on 127.0.0.1:5432 for the second
database (skipped with a note when unreachable). HERALD_BIN runs another binary (a debug build,
for a quick check of the script at small N).
"""
import http.client
import importlib.util
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import common  # noqa: E402
from keepalive import Api  # noqa: E402

# The segments benchmark's loading of contacts and events, and its Db (with the ceiling's timing).
_spec = importlib.util.spec_from_file_location("segments_run", os.path.join(HERE, "..", "segments", "run.py"))
segments = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(segments)

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
segments.N = N
RUNS = int(os.environ.get("RUNS") or 50)
WARM = int(os.environ.get("WARM") or 5)
PORT = 18293
SINK = 18294
AIM = 0.200
DAY = 86_400_000


def seed_sql(db, project, now):
    """Contacts and events as segments/run.py loads them, then suppressions (the addresses
    ending in 07@, about N / 100) and the names of the loaded events."""
    segments.load(db, project, now)
    db.run(
        f"INSERT INTO suppressions (project_id, email, reason, detail, email_id, created_at) "
        f"SELECT project_id, email, CASE WHEN length(email) % 3 = 0 THEN 'COMPLAINT' "
        f"WHEN length(email) % 3 = 1 THEN 'MANUAL' ELSE 'HARD_BOUNCE' END, NULL, NULL, created_at "
        f"FROM contacts WHERE project_id = '{project}' AND email LIKE '%07@example.com'"
    )
    db.run(
        f"INSERT INTO event_names (project_id, name, created_at) SELECT project_id, name, MIN(created_at) "
        f"FROM events WHERE project_id = '{project}' GROUP BY project_id, name ON CONFLICT DO NOTHING"
    )
    db.run("ANALYZE")


def login(email, password):
    """A dashboard session's cookie."""
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60)
    conn.request("POST", "/auth/login", body=json.dumps({"email": email, "password": password}),
                 headers={"Content-Type": "application/json"})
    reply = conn.getresponse()
    reply.read()
    if reply.status >= 400:
        sys.exit(f"login: {reply.status}")
    cookies = [c.split(";", 1)[0] for c in reply.headers.get_all("Set-Cookie") or []]
    conn.close()
    return "; ".join(cookies)


def seed_api(api, key_api, key, db, project):
    """The rest of a project, made through the API; the ids the pages are opened with."""
    ids = {}
    ids["topic"] = api("POST", "/topics", None, {"name": "Product news", "defaultSubscription": "OPT_OUT"})["id"]
    body = "<p>Hello {{firstName ?? \"there\"}},</p><p>Your plan: {{plan ?? \"none\"}}. " \
           "<a href=\"https://acme.test/account\">Your account</a>.</p>"
    tpls = [api("POST", "/templates", None, {"name": name, "type": kind, "subject": subject, "body": body,
                                              "from": "hello@acme.test"})["id"]
            for name, kind, subject in [("Welcome", "TRANSACTIONAL", "Welcome, {{firstName ?? \"friend\"}}"),
                                        ("Receipt", "TRANSACTIONAL", "Your receipt"),
                                        ("Newsletter", "MARKETING", "News for {{plan ?? \"you\"}}")]]
    ids["template"] = tpls[0]

    def dynamic(name, *filters):
        return api("POST", "/segments", None, {"name": name, "type": "DYNAMIC", "condition": {
            "logic": "AND", "groups": [{"filters": list(filters)}]}})["id"]

    ids["segment"] = dynamic(
        "Active pro", {"field": "data.plan", "operator": "equals", "value": "pro"},
        {"field": "event.login", "operator": "triggeredWithin", "value": 30, "unit": "days"},
        {"field": "subscribed", "operator": "equals", "value": True})
    dynamic("Buyers", {"field": "event.purchase", "operator": "triggered"},
            {"field": "data.score", "operator": "greaterThan", "value": 50})
    dynamic("Germany", {"field": "data.country", "operator": "equals", "value": "de"})
    ids["small"] = dynamic("Score under 10", {"field": "data.score", "operator": "lessThan", "value": 10})
    ids["static"] = api("POST", "/segments", None, {"name": "VIP", "type": "STATIC"})["id"]
    vip = [f"c{1 + i * (N // 500 or 1)}@example.com" for i in range(min(500, N))]
    api("POST", f"/segments/{ids['static']}/members", None, {"emails": vip})
    try:
        ids["domain"] = api("POST", "/domains", None, {"domain": "acme.test"})["id"]
    except RuntimeError as e:
        print(f"(no domain: {e})")

    # The sent campaign, to a tenth of the contacts.
    campaign = {"name": "Spring news", "subject": "News for {{plan ?? \"you\"}}", "body": body,
                "from": "news@acme.test", "audienceType": "SEGMENT", "segmentId": ids["small"]}
    ids["campaign"] = cmp = api("POST", "/campaigns", None, campaign)["data"]["id"]
    t = time.perf_counter()
    api("POST", f"/campaigns/{cmp}/send", None)
    while api("GET", f"/campaigns/{cmp}", None)["status"] not in ("SENT", "FAILED", "CANCELLED"):
        if time.perf_counter() - t > 3600:
            sys.exit("the campaign did not finish within an hour")
        time.sleep(0.5)
    sent = db.run(f"SELECT COUNT(*) FROM emails WHERE campaign_id = '{cmp}'")
    print(f"campaign sent to {int(sent):,} recipients in {time.perf_counter() - t:.1f} s")
    api("POST", "/campaigns", None, dict(campaign, name="Summer news (draft)", audienceType="ALL",
                                         segmentId=None))

    # Workflows: one enabled that 2,000 contacts entered, one disabled.
    def workflow(name, event, steps, enabled):
        wf = api("POST", "/workflows", None, {"name": name, "triggerConfig": {"eventName": event}})["id"]
        made = [api("POST", f"/workflows/{wf}/steps", None, {"type": s, "config": c})["id"] for s, c in steps]
        for a, b in zip(made, made[1:]):
            api("POST", f"/workflows/{wf}/transitions", None, {"fromStepId": a, "toStepId": b})
        if enabled:
            api("PATCH", f"/workflows/{wf}", None, {"enabled": True})
        return wf

    ids["workflow"] = workflow("Welcome", "signup", [
        ("SEND_EMAIL", {"templateId": tpls[0]}), ("DELAY", {"amount": 3, "unit": "days"}),
        ("EXIT", {"reason": "done"})], True)
    workflow("Win back", "churned", [
        ("DELAY", {"amount": 7, "unit": "days"}), ("SEND_EMAIL", {"templateId": tpls[2]}),
        ("EXIT", {"reason": "done"})], False)
    entered = [f"c{100 * i + 2}@example.com" for i in range(min(2000, N // 100))]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda e: key_api("POST", "/v1/track", key, {"email": e, "event": "signup"}), entered))
    t = time.perf_counter()
    while int(db.run(f"SELECT COUNT(*) FROM workflow_executions WHERE workflow_id = '{ids['workflow']}' "
                     f"AND status = 'WAITING'") or 0) < len(entered):
        if time.perf_counter() - t > 600:
            print("(the executions did not all reach their delay within 10 minutes)")
            break
        time.sleep(0.5)
    ids["execution"] = db.run(f"SELECT id FROM workflow_executions WHERE workflow_id = '{ids['workflow']}' "
                              f"ORDER BY id LIMIT 1")
    ids["contact"] = db.run(f"SELECT id FROM contacts WHERE project_id = '{project}' AND email = 'c2@example.com'")
    db.run("ANALYZE")
    return ids


def calls(project, ids, api):
    """(page, call, method, path or path(i), body) of every call the pages make when they open."""
    rng = random.Random(7)
    terms = [f"c{rng.randrange(1, N + 1)}@" for _ in range(RUNS + WARM)]
    # The cursor of the 20th page of contacts.
    cursor = None
    for _ in range(20):
        page = api("GET", "/contacts?limit=50" + (f"&cursor={urllib.parse.quote(cursor)}" if cursor else ""), None)
        cursor = page.get("cursor") or cursor
    now = time.time()
    iso = lambda t: time.strftime("%Y-%m-%dT%H:%M:00Z", time.gmtime(t))  # noqa: E731
    month = f"from={iso(now - 30 * 86400)}&to={iso(now + 60)}"
    day = f"from={iso(now - 86400)}&to={iso(now + 60)}"
    c, seg, cmp, wf = ids["contact"], ids["segment"], ids["campaign"], ids["workflow"]
    preview = {"condition": {"logic": "AND", "groups": [{"filters": [
        {"field": "data.plan", "operator": "equals", "value": "pro"},
        {"field": "event.login", "operator": "triggeredWithin", "value": 30, "unit": "days"},
        {"field": "subscribed", "operator": "equals", "value": True}]}]}}
    rows = [
        ("every page", "GET /users/@me", "/users/@me"),
        ("every page", "GET /users/@me/projects", "/users/@me/projects"),
        ("home", "GET /projects/{id}/setup-state", f"/projects/{project}/setup-state"),
        ("contacts", "GET /contacts?limit=50 (first page)", "/contacts?limit=50"),
        ("contacts", "GET /contacts?limit=50&cursor= (20th page)",
         f"/contacts?limit=50&cursor={urllib.parse.quote(cursor or '')}"),
        ("contacts", "GET /contacts?search=c<n>@ (one address)",
         lambda i: f"/contacts?limit=50&search={urllib.parse.quote(terms[i])}"),
        ("contacts", "GET /contacts?search=example.com (every contact)", "/contacts?limit=50&search=example.com"),
        ("contact", "GET /contacts/{id}", f"/contacts/{c}"),
        ("contact", "GET /events/contact/{id}?limit=25", f"/events/contact/{c}?limit=25"),
        ("contact", "GET /contacts/{id}/emails", f"/contacts/{c}/emails"),
        ("contact", "GET /contacts/{id}/executions", f"/contacts/{c}/executions"),
        ("contact, filters", "GET /topics", "/topics"),
        ("filters, template", "GET /contacts/fields", "/contacts/fields"),
        ("filters", "GET /contacts/fields/data.plan/values?limit=50", "/contacts/fields/data.plan/values?limit=50"),
        ("filters, events", "GET /events/names", "/events/names"),
        ("segments, filters", "GET /segments", "/segments"),
        ("segment", "GET /segments/{id}", f"/segments/{seg}"),
        ("segment", "GET /segments/{id}/contacts?page=1&pageSize=50 (3 conditions)",
         f"/segments/{seg}/contacts?page=1&pageSize=50"),
        ("segment", "GET /segments/{id}/contacts?page=100&pageSize=50 (3 conditions)",
         f"/segments/{seg}/contacts?page=100&pageSize=50"),
        ("segment", "GET /segments/{id}/contacts?page=1&pageSize=50 (static, 500)",
         f"/segments/{ids['static']}/contacts?page=1&pageSize=50"),
        ("segment editor", "POST /segments/preview (3 conditions, counts every contact)",
         "/segments/preview", preview),
        ("campaigns", "GET /campaigns?limit=50", "/campaigns?limit=50"),
        ("campaigns", "GET /analytics/campaign-stats?page=1&pageSize=100", "/analytics/campaign-stats?page=1&pageSize=100"),
        ("campaign", "GET /campaigns/{id} (sent)", f"/campaigns/{cmp}"),
        ("campaign", "GET /campaigns/{id}/stats", f"/campaigns/{cmp}/stats"),
        ("campaign, workflow", "GET /templates?limit=100", "/templates?limit=100"),
        ("campaign", "GET /analytics/timeseries (24 h, by hour)", f"/analytics/timeseries?{day}&interval=hour&timezone=UTC"),
        ("templates", "GET /templates?limit=50", "/templates?limit=50"),
        ("template", "GET /templates/{id}", f"/templates/{ids['template']}"),
        ("template", "GET /templates/{id}/usage", f"/templates/{ids['template']}/usage"),
        ("workflows", "GET /workflows?limit=25", "/workflows?limit=25"),
        ("workflows, workflow", "GET /workflows/{id}", f"/workflows/{wf}"),
        ("workflows", "GET /workflows/{id}/executions?limit=1", f"/workflows/{wf}/executions?limit=1"),
        ("workflows", "GET /workflows/{id}/executions?limit=1&status=RUNNING&status=WAITING",
         f"/workflows/{wf}/executions?limit=1&status=RUNNING&status=WAITING"),
        ("workflow", "GET /workflows/fields?workflowId=", f"/workflows/fields?workflowId={wf}"),
        ("executions", "GET /workflows/{id}/executions?limit=50", f"/workflows/{wf}/executions?limit=50"),
        ("execution", "GET /workflows/{id}/executions/{id}", f"/workflows/{wf}/executions/{ids['execution']}"),
        ("suppressions", "GET /suppressions?limit=50", "/suppressions?limit=50"),
        ("suppressions", "GET /suppressions?search=c1 (search)", "/suppressions?limit=50&search=c1"),
        ("events", "GET /events/stats", "/events/stats"),
        ("event", "GET /events/login/usage", "/events/login/usage"),
        ("activity", "GET /activity?limit=50", "/activity?limit=50"),
        ("activity", "GET /activity/types", "/activity/types"),
        ("activity", "GET /activity/recent-count?minutes=60", "/activity/recent-count?minutes=60"),
        ("analytics", "GET /analytics/timeseries (30 days, by day)", f"/analytics/timeseries?{month}&interval=day&timezone=UTC"),
        ("analytics", "GET /analytics/top-campaigns", f"/analytics/top-campaigns?{month}&metric=openRate&limit=10"),
        ("analytics", "GET /analytics/top-events", f"/analytics/top-events?{month}&limit=10"),
        ("domains", "GET /domains/project/{id}", f"/domains/project/{project}"),
        ("domains, settings", "GET /users/@me/projects/{id}/security", f"/users/@me/projects/{project}/security"),
        ("members", "GET /projects/{id}/members", f"/projects/{project}/members"),
        ("billing", "GET /users/@me/projects/{id}/billing-consumption", f"/users/@me/projects/{project}/billing-consumption"),
        ("billing", "GET /users/@me/projects/{id}/billing-limits", f"/users/@me/projects/{project}/billing-limits"),
        ("billing", "GET /users/@me/projects/{id}/billing-invoices", f"/users/@me/projects/{project}/billing-invoices"),
    ]
    if "domain" in ids:
        rows.insert(-5, ("domain", "GET /domains/{id}", f"/domains/{ids['domain']}"))
    return rows


def measure(api, method, path, body):
    """WARM calls, then RUNS timed one after the other: (p50, p99) in seconds, or the error."""
    at = path if callable(path) else (lambda i: path)
    try:
        for i in range(WARM):
            api(method, at(i), None, body)
        times = []
        for i in range(RUNS):
            t = time.perf_counter()
            api(method, at(WARM + i), None, body)
            times.append(time.perf_counter() - t)
    except RuntimeError as e:
        api.reset()
        return str(e)[:160]
    times.sort()
    return statistics.median(times), times[math.ceil(0.99 * len(times)) - 1]


def bench(label, url, work):
    print(f"### {label}: {N:,} contacts")
    made = json.loads(subprocess.run([common.BIN, "init", "--json", "--database-url", url, "--data-dir", work],
                                     capture_output=True, text=True, check=True).stdout)
    key, project = made["secretKey"], made["projectId"]
    db = segments.Db(url, work)
    now = int(time.time() * 1000)
    t = time.perf_counter()
    seed_sql(db, project, now)
    print(f"contacts, events and suppressions by SQL: {time.perf_counter() - t:.1f} s")
    sink = common.start_sink(SINK)
    server = None
    try:
        server = common.serve(PORT, work, url, common.smtp_env(SINK))
        cookie = login(made["email"], made["password"])
        api = Api(PORT, headers={"Cookie": cookie, "X-Project-Id": project})
        t = time.perf_counter()
        ids = seed_api(api, Api(PORT), key, db, project)
        print(f"the rest through the API: {time.perf_counter() - t:.1f} s")
        ceiling = db.timed(f"SELECT COUNT(*) FROM contacts WHERE project_id = '{project}'")
        results = []
        for page, name, path, *body in calls(project, ids, api):
            method = "POST" if body else "GET"
            got = measure(api, method, path, body[0] if body else None)
            results.append((page, name, got))
            shown = got if isinstance(got, str) else f"p50 {got[0] * 1000:.1f} ms, p99 {got[1] * 1000:.1f} ms"
            print(f"  {page}: {name}: {shown}", flush=True)
        print(f"ceiling, SELECT COUNT(*) of the project's contacts in the database's client: {ceiling * 1000:.1f} ms")
        return results, ceiling
    finally:
        if server is not None and server.poll() is not None:
            print(f"the server exited by itself: status {server.returncode}")
        common.stop(server)
        sink.terminate()
        sink.wait()


def cell(got):
    if isinstance(got, str):
        return f"error: {got}"
    p50, p99 = got
    return f"{p50 * 1000:.1f} / {'**' if p99 < AIM else ''}{p99 * 1000:.1f}{' ✔**' if p99 < AIM else ' ✘'}"


def table(runs):
    """One markdown table: a row a call, a column a database (p50 / p99 in ms)."""
    labels = list(runs)
    print(f"\n| Page | API call | " + " | ".join(f"{l} p50 / p99 ms" for l in labels) + " |")
    print("|---|---|" + "---|" * len(labels))
    first = runs[labels[0]][0]
    for i, (page, name, _) in enumerate(first):
        print(f"| {page} | `{name}` | " + " | ".join(cell(runs[l][0][i][2]) for l in labels) + " |")
    print("| ceiling | `SELECT COUNT(*)` of the project's contacts, in the database's client | "
          + " | ".join(f"{runs[l][1] * 1000:.1f}" for l in labels) + " |")


def main():
    if not os.access(common.BIN, os.X_OK):
        sys.exit(f"{common.BIN} is missing: cargo build --release -p herald")
    only = os.environ.get("ONLY", "")
    if only not in ("", "sqlite", "postgres"):
        sys.exit("ONLY is sqlite or postgres")
    runs = {}
    if only != "postgres":
        work = tempfile.mkdtemp()
        try:
            runs["SQLite"] = bench("SQLite", f"sqlite://{work}/herald.db", work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    if only != "sqlite":
        def pg(url):
            work = tempfile.mkdtemp()
            try:
                runs["PostgreSQL"] = bench("PostgreSQL", url, work)
            finally:
                shutil.rmtree(work, ignore_errors=True)
        common.with_pg(pg, "dashboard")
    if runs:
        table(runs)


if __name__ == "__main__":
    main()
