#!/usr/bin/env python3
"""Races between requests that change the same things, against a fresh `herald serve` on SQLite
and then on PostgreSQL (127.0.0.1:5432, a database of its own): each round starts a handful of
conflicting requests at once (a delete and the writes that refer to what it deletes, concurrent
invitations, imports, campaign moves, an enabled workflow running while its contacts go…) and
counts every answer. Any 5xx, any `ERROR` or panic in the server's log, and a project left
without an `OWNER` fail the run (exit 1). Bounded by the rounds, not timed.

    cargo build --release --bin herald
    host/benches/hostile/races.py [ROUNDS]          # both databases, 10 rounds a scenario
    ONLY=postgres HERALD_BIN=… host/benches/hostile/races.py 30

It found the classes that `tests/api/http/races.rs` now covers (docs/benchmarks.md, "Races").
"""
import collections, json, os, re, subprocess, sys, threading, time
import urllib.error, urllib.request, http.cookiejar

import databases

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BIN = os.environ.get("HERALD_BIN") or os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "herald")
PORT = int(os.environ.get("PORT", "18181"))
BASE = f"http://127.0.0.1:{PORT}"
R = int(sys.argv[1]) if len(sys.argv) > 1 else 10
bad = collections.Counter(); bad_examples = {}; tally = collections.Counter(); messages = {}; LOST = []


def record(method, path, code, body, sent):
    shape = (method, re.sub(r"/[a-z]{3}_[0-9a-f]{32}", "/ID", path.split("?")[0]), code)
    tally[shape] += 1
    if code >= 400 and isinstance(body, dict):
        # The standard shape nests the message under `error`; `/v1/send`'s has it at the top.
        error = body.get("error")
        messages.setdefault(shape, error.get("message", "") if isinstance(error, dict) else body.get("message", ""))
    if code >= 500:
        bad[shape] += 1
        bad_examples.setdefault(shape, (path, sent, body))


def request(opener, method, path, body=None, key=None):
    """One request through `opener` (a cookie jar's, for a dashboard user), every answer counted."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(BASE + path, data=data, method=method)
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with opener.open(req, timeout=60) as r:
            raw = r.read()
            record(method, path, r.status, None, body)
            return r.status, (json.loads(raw) if raw and raw[:1] in b"{[" else raw)
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            b = json.loads(raw)
        except ValueError:
            b = raw
        record(method, path, e.code, b, body)
        return e.code, b


API = urllib.request.build_opener()


def call(method, path, key, body=None):
    return request(API, method, path, body, key)


def race(fns):
    """Runs every function of `fns` at once (threads behind a barrier); their answers in order."""
    barrier = threading.Barrier(len(fns)); out = [None] * len(fns)
    def run(i, f):
        barrier.wait()
        try:
            out[i] = f()
        except Exception as e:  # a broken scenario must fail the run, not vanish with its thread
            LOST.append(f"exception: {e!r}")
            raise
    ts = [threading.Thread(target=run, args=(i, f)) for i, f in enumerate(fns)]
    [t.start() for t in ts]; [t.join() for t in ts]
    return out


def campaign_race(key, r, audience, also):
    """A campaign of `audience` sent, cancelled, deleted, replaced, duplicated and tested at once,
    with the requests of `also`."""
    body = {"name": f"c{r}", "subject": "s", "body": "b", "from": "a@mail.example.net", **audience}
    st, c = call("POST", "/campaigns", key, body)
    assert st == 201, c
    cid = c["data"]["id"]
    race([
        lambda: call("POST", f"/campaigns/{cid}/send", key, {}),
        lambda: call("POST", f"/campaigns/{cid}/cancel", key),
        lambda: call("DELETE", f"/campaigns/{cid}", key),
        lambda: call("PUT", f"/campaigns/{cid}", key, {**body, "subject": "s2"}),
        lambda: call("POST", f"/campaigns/{cid}/duplicate", key),
        lambda: call("GET", f"/campaigns/{cid}/stats", key),
        lambda: call("POST", f"/campaigns/{cid}/test", key, {"email": "t@example.com"}),
    ] + also)


def deletes(key):
    st, seg = call("POST", "/segments", key, {"name": "static", "type": "STATIC"}); seg = seg["id"]
    st, dseg = call("POST", "/segments", key, {"name": "dyn", "type": "DYNAMIC", "trackMembership": True, "condition": {"logic": "AND", "groups": [{"filters": [{"field": "data.plan", "operator": "equals", "value": "pro"}]}]}}); dseg = dseg["id"]
    st, wf = call("POST", "/workflows", key, {"name": "wf", "eventName": "signup"})
    for r in range(R):
        email = f"race{r}@example.com"
        st, c = call("POST", "/contacts", key, {"email": email, "data": {"plan": "pro"}}); cid = c["id"]
        race([
            lambda: call("DELETE", f"/contacts/{cid}", key),
            lambda: call("POST", "/v1/track", key, {"event": "signup", "email": email, "data": {"x": 1}}),
            lambda: call("PATCH", f"/contacts/{cid}", key, {"data": {"plan": "free"}}),
            lambda: call("POST", f"/segments/{seg}/members", key, {"emails": [email]}),
            lambda: call("POST", "/contacts/bulk-delete", key, {"contactIds": [cid]}),
            lambda: call("POST", "/contacts/bulk-subscribe", key, {"contactIds": [cid]}),
            lambda: call("GET", f"/events/contact/{cid}", key),
            lambda: call("POST", "/contacts", key, {"email": email, "data": {"plan": "pro"}}),
            lambda: call("POST", f"/segments/{dseg}/compute", key),
            lambda: call("DELETE", f"/segments/{seg}/members", key, {"emails": [email]}),
        ])
        # A static segment's cached count follows its members through the deletes (its members
        # are stored, so the two must agree once a round's races are over).
        st, got = call("GET", f"/segments/{seg}", key)
        st, page = call("GET", f"/segments/{seg}/contacts?page=1&pageSize=10", key)
        if got.get("memberCount") != page.get("total"):
            LOST.append(f"round {r}: static segment memberCount {got.get('memberCount')} but {page.get('total')} members")
    print("contacts done", sum(bad.values()))
    # segments: delete vs use
    for r in range(R):
        st, s = call("POST", "/segments", key, {"name": f"s{r}", "type": "STATIC"}); sid = s["id"]
        st, d2 = call("POST", "/segments", key, {"name": f"d{r}", "type": "DYNAMIC", "condition": {"logic": "AND", "groups": [{"filters": [{"field": f"segment.{sid}", "operator": "memberOf"}]}]}})
        race([
            lambda: call("DELETE", f"/segments/{sid}", key),
            lambda: call("POST", f"/segments/{sid}/members", key, {"emails": ["race1@example.com", "new@example.com"], "createMissing": True}),
            lambda: call("PATCH", f"/segments/{sid}", key, {"name": f"s{r}x", "trackMembership": True}),
            lambda: call("POST", f"/segments/{sid}/compute", key),
            lambda: call("POST", f"/segments/{sid}/refresh", key),
            lambda: call("GET", f"/segments/{sid}/contacts?page=1&pageSize=10", key),
            lambda: call("PATCH", f"/segments/{d2['id']}", key, {"trackMembership": True}) if isinstance(d2, dict) and 'id' in d2 else (0, None),
            lambda: call("POST", "/campaigns", key, {"name": "c", "subject": "s", "body": "b", "from": "a@mail.example.net", "audienceType": "SEGMENT", "segmentId": sid}),
        ])
    print("segments done", sum(bad.values()))
    # templates
    for r in range(R):
        st, t = call("POST", "/templates", key, {"name": f"t{r}", "subject": "Hi", "body": "<p>x</p>", "type": "MARKETING"}); tid = t["id"]
        race([
            lambda: call("DELETE", f"/templates/{tid}", key),
            lambda: call("POST", f"/templates/{tid}/duplicate", key),
            lambda: call("PATCH", f"/templates/{tid}", key, {"subject": "Yo"}),
            lambda: call("GET", f"/templates/{tid}/usage", key),
            lambda: call("POST", f"/workflows/{wf['id']}/steps", key, {"type": "SEND_EMAIL", "config": {"templateId": tid}}),
            lambda: call("POST", "/v1/send", key, {"to": "race1@example.com", "from": "a@mail.example.net", "template": tid}),
        ])
    print("templates done", sum(bad.values()))
    # workflows
    for r in range(R):
        st, w = call("POST", "/workflows", key, {"name": f"w{r}", "eventName": "signup"}); wid = w["id"]
        st, s1 = call("POST", f"/workflows/{wid}/steps", key, {"type": "DELAY", "config": {"amount": 1, "unit": "minutes"}})
        s1id = s1.get("id") if isinstance(s1, dict) else None
        race([
            lambda: call("DELETE", f"/workflows/{wid}", key),
            lambda: call("PATCH", f"/workflows/{wid}", key, {"enabled": True}),
            lambda: call("POST", f"/workflows/{wid}/steps", key, {"type": "EXIT"}),
            lambda: call("POST", f"/workflows/{wid}/executions", key, {"email": "race1@example.com"}),
            lambda: call("POST", "/v1/track", key, {"event": "signup", "email": f"w{r}@example.com"}),
            lambda: call("DELETE", f"/workflows/{wid}/steps/{s1id}", key),
            lambda: call("POST", f"/workflows/{wid}/executions/cancel-all", key),
            lambda: call("PATCH", f"/workflows/{wid}/steps/{s1id}", key, {"config": {"amount": 2, "unit": "minutes"}}),
        ])
    print("workflows done", sum(bad.values()))
    # fields and events
    for r in range(R):
        call("POST", "/contacts", key, {"email": f"f{r}@example.com", "data": {f"fld{r}": 1}})
        call("POST", "/v1/track", key, {"event": f"ev{r}", "email": f"f{r}@example.com"})
        race([
            lambda: call("DELETE", f"/contacts/fields/fld{r}", key),
            lambda: call("POST", "/contacts", key, {"email": f"g{r}@example.com", "data": {f"fld{r}": "x"}}),
            lambda: call("POST", "/segments", key, {"name": f"fs{r}", "type": "DYNAMIC", "condition": {"logic": "AND", "groups": [{"filters": [{"field": f"data.fld{r}", "operator": "exists"}]}]}}),
            lambda: call("DELETE", f"/events/ev{r}", key),
            lambda: call("POST", "/v1/track", key, {"event": f"ev{r}", "email": f"h{r}@example.com"}),
            lambda: call("GET", f"/events/ev{r}/usage", key),
            lambda: call("GET", f"/contacts/fields/fld{r}/values", key),
        ])
    print("fields done", sum(bad.values()))
    for r in range(R):
        campaign_race(key, r, {"audienceType": "ALL"}, [])
    print("campaigns done", sum(bad.values()))

def deletes_of_what_is_named(key):
    st, d = call("POST", "/domains", key, {"domain": "mail.example.net"}); assert st == 201, d
    st, wf = call("POST", "/workflows", key, {"name": "wf2", "eventName": "signup2"})
    wf2 = wf["id"]
    st, s = call("POST", f"/workflows/{wf2}/steps", key, {"type": "DELAY", "config": {"amount": 1, "unit": "hours"}})
    for r in range(R):
        email = f"m{r}@example.com"
        st, c = call("POST", "/contacts", key, {"email": email}); cid = c["id"]
        race([
            lambda: call("DELETE", f"/contacts/{cid}", key),
            lambda: call("POST", "/v1/send", key, {"to": email, "from": "a@mail.example.net", "subject": "s", "body": "b"}),
            lambda: call("POST", f"/workflows/{wf2}/executions", key, {"contactId": cid}),
            lambda: call("POST", f"/workflows/{wf2}/executions", key, {"email": email}),
            lambda: call("POST", "/contacts/lookup", key, {"emails": [email]}),
            lambda: call("POST", "/v1/track", key, {"event": "signup2", "email": email}),
            lambda: call("GET", f"/contacts/{cid}", key),
            lambda: call("POST", "/contacts/bulk-unsubscribe", key, {"contactIds": [cid]}),
        ])
    print("contacts2 done", sum(bad.values()))
    for r in range(R):
        st, w = call("POST", "/workflows", key, {"name": f"x{r}", "eventName": "signup"}); wid = w["id"]
        st, a = call("POST", f"/workflows/{wid}/steps", key, {"type": "DELAY", "config": {"amount": 1, "unit": "hours"}})
        st, b = call("POST", f"/workflows/{wid}/steps", key, {"type": "EXIT"})
        st, e = call("POST", f"/workflows/{wid}/executions", key, {"email": f"x{r}@example.com"})
        eid = e.get("id") if isinstance(e, dict) else "exe_0"
        race([
            lambda: call("DELETE", f"/workflows/{wid}/steps/{b['id']}", key),
            lambda: call("POST", f"/workflows/{wid}/transitions", key, {"fromStepId": a["id"], "toStepId": b["id"]}),
            lambda: call("DELETE", f"/workflows/{wid}/steps/{a['id']}", key),
            lambda: call("DELETE", f"/workflows/{wid}/executions/{eid}", key),
            lambda: call("GET", f"/workflows/{wid}/executions/{eid}", key),
            lambda: call("DELETE", f"/workflows/{wid}", key),
            lambda: call("POST", f"/workflows/{wid}/steps", key, {"type": "EXIT"}),
        ])
    print("workflows2 done", sum(bad.values()))
    for r in range(R):
        st, sg = call("POST", "/segments", key, {"name": f"cs{r}", "type": "STATIC"}); sid = sg["id"]
        call("POST", f"/segments/{sid}/members", key, {"emails": [f"cm{r}@example.com"], "createMissing": True})
        campaign_race(key, r, {"audienceType": "SEGMENT", "segmentId": sid}, [
            lambda: call("DELETE", f"/segments/{sid}", key),
        ])
    print("campaigns done", sum(bad.values()))
    for r in range(R):
        name = f"d{r}.example.org"
        st, d = call("POST", "/domains", key, {"domain": name}); did = d["id"]
        race([
            lambda: call("DELETE", f"/domains/{did}", key),
            lambda: call("POST", "/v1/send", key, {"to": "z@example.com", "from": f"a@{name}", "subject": "s", "body": "b"}),
            lambda: call("PATCH", f"/domains/{did}", key, {"allowSubdomains": True}),
            lambda: call("GET", f"/domains/{did}/verify", key),
            lambda: call("POST", "/domains", key, {"domain": name}),
            lambda: call("POST", "/templates", key, {"name": f"dt{r}", "subject": "s", "body": "b", "type": "MARKETING", "from": f"a@{name}"}),
        ])
    print("domains done", sum(bad.values()))

def engine(key):
    st, tpl = call("POST", "/templates", key, {"name": "eng", "type": "TRANSACTIONAL", "subject": "Hi", "body": "<p>Hello {{email}}</p>", "from": "a@mail.example.net"})
    tpl = tpl["id"]
    for r in range(R):
        st, wf = call("POST", "/workflows", key, {"name": f"e{r}", "triggerConfig": {"eventName": f"go{r}"}, "allowReentry": True})
        wf = wf["id"]
        steps = [("UPDATE_CONTACT", {"data": {"plan": "pro"}}), ("SEND_EMAIL", {"templateId": tpl}), ("DELAY", {"amount": 0, "unit": "minutes"}), ("UPDATE_CONTACT", {"subscribed": False}), ("EXIT", {"reason": "done"})]
        ids = [call("POST", f"/workflows/{wf}/steps", key, {"type": t, "config": c})[1]["id"] for t, c in steps]
        for i in range(len(ids) - 1):
            call("POST", f"/workflows/{wf}/transitions", key, {"fromStepId": ids[i], "toStepId": ids[i + 1]})
        st, b = call("PATCH", f"/workflows/{wf}", key, {"enabled": True})
        if st != 200: print("enable", st, b); return
        emails = [f"e{r}_{i}@example.com" for i in range(20)]
        cids = [call("POST", "/contacts", key, {"email": e})[1]["id"] for e in emails]
        fns = []
        for i, e in enumerate(emails):
            fns.append(lambda e=e: call("POST", "/v1/track", key, {"event": f"go{r}", "email": e}))
            if i % 2 == 0:
                fns.append(lambda c=cids[i]: (time.sleep(0.05 * (c[-1] in "0123")), call("DELETE", f"/contacts/{c}", key))[1])
        if r % 3 == 0:
            fns.append(lambda: (time.sleep(0.1), call("DELETE", f"/workflows/{wf}", key))[1])
        if r % 3 == 1:
            fns.append(lambda: (time.sleep(0.1), call("DELETE", f"/workflows/{wf}/steps/{ids[2]}", key))[1])
        if r % 3 == 2:
            fns.append(lambda: (time.sleep(0.1), call("PATCH", f"/workflows/{wf}/steps/{ids[1]}", key, {"config": {"templateId": tpl}}))[1])
        race(fns)
    time.sleep(5)
    print("engine done", sum(bad.values()))

class User:
    def __init__(self, email):
        self.jar = http.cookiejar.CookieJar()
        self.op = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))
        st, b = self.call("POST", "/auth/signup", {"email": email, "password": "correct horse battery staple 1"})
        if st >= 300 and st != 409: print("signup", st, b)
    def call(self, method, path, body=None):
        return request(self.op, method, path, body)

def accounts(key):
    lost = 0
    for r in range(R):
        a = User(f"a{r}@example.com"); b = User(f"b{r}@example.com")
        st, p = a.call("POST", "/users/@me/projects", {"name": f"p{r}"})
        if st >= 300: print("project", st, p); return
        p = p.get("data", p); pid = p["id"]
        st, m = a.call("POST", f"/projects/{pid}/members", {"email": f"b{r}@example.com", "role": "OWNER"})
        if st >= 300: print("invite", st, m); return
        st, ms = a.call("GET", f"/projects/{pid}/members")
        pass
        lst = ms.get("members", [])
        ids = {x.get("email"): x.get("userId") or x.get("id") for x in lst}
        ua, ub = ids.get(f"a{r}@example.com"), ids.get(f"b{r}@example.com")
        if r % 2 == 0:
            race([lambda: a.call("PATCH", f"/projects/{pid}/members/{ub}", {"role": "MEMBER"}),
                  lambda: b.call("PATCH", f"/projects/{pid}/members/{ua}", {"role": "MEMBER"})])
        else:
            race([lambda: a.call("DELETE", f"/projects/{pid}/members/{ub}"),
                  lambda: b.call("DELETE", f"/projects/{pid}/members/{ua}")])
        st, ms = a.call("GET", f"/projects/{pid}/members")
        if st != 200: st, ms = b.call("GET", f"/projects/{pid}/members")
        lst = ms.get("members", []) if isinstance(ms, dict) else []
        owners = [x for x in lst if x.get("role") == "OWNER"]
        if not owners: lost += 1; LOST.append(pid); print("NO OWNER LEFT", r, lst)
        # project delete while its keys are used, and key rotation
        sk = (p.get("secretKey") or p.get("keys", {}).get("secret") if isinstance(p, dict) else None)
        if sk:
            race([lambda: call("POST", "/contacts", sk, {"email": "k@example.com"}),
                  lambda: call("POST", "/v1/track", sk, {"event": "x", "email": "k2@example.com"}),
                  lambda: a.call("POST", f"/users/@me/projects/{pid}/regenerate-keys") if r % 2 else b.call("DELETE", f"/users/@me/projects/{pid}"),
                  lambda: call("POST", "/segments", sk, {"name": "s", "type": "STATIC"}),
                  lambda: a.call("DELETE", f"/users/@me/projects/{pid}"),
                  lambda: call("POST", "/templates", sk, {"name": "t", "subject": "s", "body": "b", "type": "MARKETING"}),
                  ])
    print("accounts done", sum(bad.values()), "lost owners", lost)

def addresses_teams_and_imports(key):
    for r in range(R):
        st, a = call("POST", "/contacts", key, {"email": f"pa{r}@example.com"}); aid = a["id"]
        st, b = call("POST", "/contacts", key, {"email": f"pb{r}@example.com"}); bid = b["id"]
        target = f"px{r}@example.com"
        race([
            lambda: call("PATCH", f"/contacts/{aid}", key, {"email": target}),
            lambda: call("PATCH", f"/contacts/{bid}", key, {"email": target}),
            lambda: call("POST", "/contacts", key, {"email": target, "data": {"x": 1}}),
            lambda: call("POST", "/v1/track", key, {"event": "e", "email": target}),
            lambda: call("DELETE", f"/contacts/{aid}", key),
            lambda: call("POST", "/contacts/bulk-delete", key, {"contactIds": [bid, aid]}),
        ])
    print("emails done", sum(bad.values()))
    for r in range(R):
        users = [User(f"s{r}@example.com") for _ in range(1)]
        race([lambda: User(f"dup{r}@example.com") for _ in range(4)])
        a = users[0]
        st, p = a.call("POST", "/users/@me/projects", {"name": f"q{r}"}); p = p.get("data", p); pid = p["id"]
        sk = p["secretKey"]
        User(f"inv{r}@example.com")
        race([
            lambda: a.call("POST", f"/projects/{pid}/members", {"email": f"inv{r}@example.com", "role": "ADMIN"}),
            lambda: a.call("POST", f"/projects/{pid}/members", {"email": f"inv{r}@example.com", "role": "MEMBER"}),
            lambda: a.call("POST", f"/projects/{pid}/members", {"email": f"new{r}@example.com"}),
            lambda: a.call("POST", f"/projects/{pid}/members", {"email": f"new{r}@example.com"}),
            lambda: a.call("POST", f"/users/@me/projects/{pid}/regenerate-keys"),
            lambda: a.call("POST", f"/users/@me/projects/{pid}/regenerate-keys"),
            lambda: a.call("PUT", f"/users/@me/projects/{pid}/billing-limits", {"emails": 5}),
            lambda: a.call("POST", f"/users/@me/projects/{pid}/reset"),
            lambda: call("POST", "/contacts", sk, {"email": "z@example.com"}),
        ])
        race([
            lambda: a.call("DELETE", f"/users/@me/projects/{pid}"),
            lambda: a.call("POST", f"/projects/{pid}/members", {"email": f"late{r}@example.com"}),
            lambda: a.call("PATCH", f"/users/@me/projects/{pid}", {"name": "renamed"}),
            lambda: a.call("PUT", f"/users/@me/projects/{pid}/billing-limits", {"emails": 7}),
            lambda: a.call("GET", f"/projects/{pid}/setup-state"),
        ])
    print("misc accounts done", sum(bad.values()))
    import io
    for r in range(R):
        csv = "email,plan\n" + "".join(f"imp{r}_{i}@example.com,pro\n" for i in range(50))
        boundary = "xyzBOUNDARY"
        body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"c.csv\"\r\nContent-Type: text/csv\r\n\r\n{csv}\r\n--{boundary}--\r\n").encode()
        def imp():
            req = urllib.request.Request(BASE + "/contacts/import", data=body, method="POST")
            req.add_header("Authorization", f"Bearer {key}"); req.add_header("Content-Type", f"multipart/form-data; boundary={boundary}")
            try:
                with urllib.request.urlopen(req, timeout=60) as resp: return resp.status, json.loads(resp.read())
            except urllib.error.HTTPError as e:
                if e.code >= 500: bad[("POST", "/contacts/import", e.code)] += 1
                return e.code, e.read()
        st, c = call("POST", "/contacts", key, {"email": f"imp{r}_1@example.com"})
        race([imp, imp, lambda: call("DELETE", f"/contacts/{c['id']}", key), lambda: call("POST", "/contacts/bulk-delete", key, {"contactIds": [c["id"]]}), lambda: call("POST", "/v1/track", key, {"event": "e", "email": f"imp{r}_2@example.com"})])
    time.sleep(3)
    print("imports done", sum(bad.values()))


def run_on(label, url, work):
    print(f"### {label}: {R} rounds a scenario")
    init = json.loads(subprocess.run([BIN, "init", "--json", "--database-url", url, "--data-dir", work], capture_output=True, text=True, check=True).stdout)
    key = init["secretKey"]
    env = dict(os.environ, HERALD_LOG="warn", HERALD_RATE_LIMIT_PER_MINUTE="100000000", HERALD_JOBS_POLL_INTERVAL_MS="50",
               HERALD_DOMAINS__ALLOW_UNVERIFIED="true", HERALD_AUTH_ATTEMPTS_PER_IP_PER_MINUTE="100000",
               HERALD_LOGIN_ATTEMPTS_PER_ACCOUNT_PER_MINUTE="100000")
    log_path = os.path.join(work, "server.log")
    with open(log_path, "w") as log:
        server = subprocess.Popen([BIN, "serve", "--listen", f"127.0.0.1:{PORT}", "--database-url", url, "--data-dir", work], env=env, stderr=log)
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(BASE + "/ready", timeout=1); break
            except OSError:
                time.sleep(0.1)
        for scenario in [deletes, deletes_of_what_is_named, engine, accounts, addresses_teams_and_imports]:
            scenario(key)
    finally:
        server.terminate(); server.wait()
    errors = [l for l in open(log_path) if ("ERROR" in l or "panicked" in l) and "request failed" not in l]
    for l in errors[:20]:
        print("server:", l.rstrip()[:300])
    return len(errors)


def main():
    if not os.access(BIN, os.X_OK):
        sys.exit(f"{BIN} is missing: cargo build --release --bin herald")
    failures = 0
    for label, database in databases.each("h_races"):
        with database() as (url, work):
            failures += run_on(label, url, work)
    print(f"{sum(tally.values())} answers:")
    for shape, n in sorted(tally.items()):
        print(f"  {n:5} {shape[0]} {shape[1]} {shape[2]} {messages.get(shape, '')[:120]}")
    for shape, n in bad.items():
        print(n, shape, "e.g.", str(bad_examples[shape])[:400])
    failures += sum(bad.values()) + len(LOST)
    print("5xx:", sum(bad.values()), "server errors, projects without an owner and broken scenarios:", failures - sum(bad.values()))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
