#!/usr/bin/env python3
"""Crashes: a `herald serve` killed (SIGKILL) again and again under load and started again on the
same database, SQLite and then PostgreSQL (127.0.0.1:5432, a database of its own), delivering into
a recording SMTP server on loopback. The load, while it crashes: `/v1/send` to one and to three
new recipients, `/v1/track` of an event that starts a workflow (a send step, a delay, an update),
a CSV import and a campaign to every contact. After the last start the load stops and the server
is given time to finish. The run fails (exit 1) when

- an accepted email (a 200 of `/v1/send`) is not `sent`, or never reached the SMTP server;
- an accepted track did not give its contact one completed execution and its email;
- the import did not end `completed` with every row, or the campaign did not end `SENT` with one
  email a contact of its audience;
- a message reached the SMTP server more often than the crash window allows (docs: a crash after
  the transport accepted a batch and before its outcomes were committed re-delivers that batch);
- an email is still `queued`, or an execution active, once the server had time to finish;
- any request is answered with another 5xx than 503 `SERVICE_UNAVAILABLE` (with `Retry-After`,
  which the clients here take as "ask again");
- the server's log has a panic.

Bounded by the number of crashes, not timed. With `PG_RESTARTS=1`, every second crash of the
PostgreSQL run is the database's (an immediate restart of the machine's cluster) while the server
runs on.

    cargo build --release --bin herald
    host/benches/hostile/crashes.py [CRASHES]          # both databases, 8 crashes each
    ONLY=sqlite HERALD_BIN=… host/benches/hostile/crashes.py 20
    ONLY=postgres PG_RESTARTS=1 host/benches/hostile/crashes.py 10
"""
import collections, json, os, random, re, socketserver, subprocess, sys, threading, time
import urllib.error, urllib.request

import databases

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BIN = os.environ.get("HERALD_BIN") or os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "herald")
PORT = int(os.environ.get("PORT", "18182"))
SMTP_PORT = PORT + 1
BASE = f"http://127.0.0.1:{PORT}"
CRASHES = int(sys.argv[1]) if len(sys.argv) > 1 else 8
# `PG_RESTARTS=1`: every second crash on PostgreSQL is the database's own (the machine's cluster,
# `pg_ctlcluster … restart -m immediate`), not the server's.
PG_RESTARTS = os.environ.get("PG_RESTARTS") == "1"
PG_CLUSTER = os.environ.get("PG_CLUSTER", "15 main").split()
# What the server runs with (the duplicate bound below follows from these).
JOBS, BATCH, LEASE = 4, 50, 3
FAILURES = []


def fail(what):
    FAILURES.append(what)
    print("FAIL:", what)


# ---------------------------------------------------------------------------- the SMTP server
RECEIVED = collections.Counter()
RECEIVED_LOCK = threading.Lock()


class Smtp(socketserver.StreamRequestHandler):
    """Just enough SMTP for the `smtp` transport: every message accepted, its Message-ID counted."""

    def reply(self, line):
        self.wfile.write(line.encode() + b"\r\n")
        self.wfile.flush()

    def handle(self):
        try:
            self.reply("220 crashes.test ESMTP")
            while True:
                line = self.rfile.readline()
                if not line:
                    return
                verb = line[:4].upper()
                if verb in (b"EHLO", b"HELO"):
                    self.reply("250-crashes.test\r\n250 8BITMIME")
                elif verb == b"DATA":
                    self.reply("354 go on")
                    message_id = None
                    while True:
                        body = self.rfile.readline()
                        if not body or body == b".\r\n":
                            break
                        if message_id is None and body.lower().startswith(b"message-id:"):
                            message_id = body.split(b":", 1)[1].strip().strip(b"<>").decode()
                    if not body:
                        return
                    with RECEIVED_LOCK:
                        RECEIVED[message_id] += 1
                    self.reply("250 queued")
                elif verb == b"QUIT":
                    self.reply("221 bye")
                    return
                else:
                    self.reply("250 ok")
        except (ConnectionError, OSError):
            return


class SmtpServer(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


# ---------------------------------------------------------------------------- HTTP
UNAVAILABLE = collections.Counter()


def call(method, path, key, body=None, timeout=30):
    """(status, body); status None when the server was not there to answer (killed meanwhile) or
    answered 503 `SERVICE_UNAVAILABLE` with `Retry-After` (its database restarting): both mean
    "ask again", and neither says whether the request was applied."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(BASE + path, data=data, method=method)
    req.add_header("Authorization", f"Bearer {key}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            return r.status, (json.loads(raw) if raw[:1] in b"{[" else raw)
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            b = json.loads(raw)
        except ValueError:
            b = raw
        if e.code == 503 and e.headers.get("Retry-After") and "SERVICE_UNAVAILABLE" in str(b):
            UNAVAILABLE[path.split("?")[0]] += 1
            return None, None
        return e.code, b
    except (OSError, ValueError):
        return None, None


def until_answered(method, path, key, body=None):
    """Asked again while the server is down; a request whose answer a crash lost may have been
    applied or not, and is asked again as is (the callers' requests are idempotent by design)."""
    for _ in range(600):
        st, b = call(method, path, key, body)
        if st is not None and st < 500:
            return st, b
        if st is not None:
            fail(f"{method} {path}: {st} {str(b)[:300]}")
            return st, b
        time.sleep(0.1)
    fail(f"{method} {path}: no answer for a minute")
    return None, None


def multipart(field, filename, content):
    boundary = "crashes" + str(random.random())[2:]
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"{field}\"; filename=\"{filename}\"\r\n"
            f"Content-Type: text/csv\r\n\r\n").encode() + content + f"\r\n--{boundary}--\r\n".encode()
    return body, f"multipart/form-data; boundary={boundary}"


# ---------------------------------------------------------------------------- the server
class Server:
    def __init__(self, url, work):
        self.url, self.work, self.proc = url, work, None
        self.log = open(os.path.join(work, "server.log"), "a")
        self.env = dict(os.environ, HERALD_LOG="warn", HERALD_RATE_LIMIT_PER_MINUTE="100000000",
                        HERALD_JOBS_POLL_INTERVAL_MS="50", HERALD_JOBS_CONCURRENCY=str(JOBS),
                        HERALD_JOBS_LEASE_SECONDS=str(LEASE), HERALD_SENDING__BATCH_SIZE=str(BATCH),
                        HERALD_DOMAINS__ALLOW_UNVERIFIED="true", HERALD_PLUGINS__TRANSPORT="smtp",
                        HERALD_PLUGINS__SMTP_HOST="127.0.0.1", HERALD_PLUGINS__SMTP_PORT=str(SMTP_PORT),
                        HERALD_PLUGINS__SMTP_TLS="none")

    def start(self):
        self.proc = subprocess.Popen([BIN, "serve", "--listen", f"127.0.0.1:{PORT}", "--database-url", self.url,
                                      "--data-dir", self.work], env=self.env, stderr=self.log)
        for _ in range(300):
            try:
                urllib.request.urlopen(BASE + "/ready", timeout=1)
                return
            except OSError:
                if self.proc.poll() is not None:
                    fail(f"the server exited with {self.proc.returncode} while starting")
                    return
                time.sleep(0.1)
        fail("the server was not ready within 30 s of its start")

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


# ---------------------------------------------------------------------------- load
class Load:
    def __init__(self, key, tag):
        self.key, self.tag = key, tag
        self.accepted = []  # email ids a 200 of /v1/send named
        self.tracked = []   # addresses whose `go` event a 2xx accepted
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def sends(self, lane):
        n = 0
        while not self.stop.is_set():
            n += 1
            to = [f"s{lane}_{n}_{i}@{self.tag}.example.com" for i in range(1 if n % 4 else 3)]
            st, b = call("POST", "/v1/send", self.key, {"to": to, "from": "hello@mail.example.net",
                                                        "subject": f"Order {n}", "body": f"<p>Order {n} for {{{{email}}}}</p>"})
            if st == 200:
                with self.lock:
                    self.accepted.extend(e["email"] for e in b["data"]["emails"])
            elif st is not None:
                fail(f"/v1/send: {st} {str(b)[:300]}")
            else:
                time.sleep(0.05)

    def tracks(self):
        n = 0
        while not self.stop.is_set():
            n += 1
            email = f"t{n}@{self.tag}.example.com"
            st, b = call("POST", "/v1/track", self.key, {"event": "go", "email": email})
            if st is not None and st < 300:
                with self.lock:
                    self.tracked.append(email)
            elif st is not None:
                fail(f"/v1/track: {st} {str(b)[:300]}")
            else:
                time.sleep(0.05)


def setup(key, tag):
    """The workflow the tracks start (send, delay, update, exit) and its enabled state."""
    st, tpl = until_answered("POST", "/templates", key, {"name": "crash", "type": "TRANSACTIONAL", "subject": "Hi",
                                                         "body": "<p>Hello {{email}}</p>", "from": "wf@mail.example.net"})
    st, wf = until_answered("POST", "/workflows", key, {"name": "crash", "triggerConfig": {"eventName": "go"}})
    wf = wf["id"]
    steps = [("SEND_EMAIL", {"templateId": tpl["id"]}), ("DELAY", {"amount": 0, "unit": "minutes"}),
             ("UPDATE_CONTACT", {"data": {"went": True}}), ("EXIT", {"reason": "done"})]
    ids = [until_answered("POST", f"/workflows/{wf}/steps", key, {"type": t, "config": c})[1]["id"] for t, c in steps]
    for a, b in zip(ids, ids[1:]):
        until_answered("POST", f"/workflows/{wf}/transitions", key, {"fromStepId": a, "toStepId": b})
    st, b = until_answered("PATCH", f"/workflows/{wf}", key, {"enabled": True})
    assert st == 200, b
    return wf


def start_import(key, tag, rows):
    csv = ("email,plan\n" + "".join(f"i{i}@{tag}.example.com,pro\n" for i in range(rows))).encode()
    body, ctype = multipart("file", "c.csv", csv)
    req = urllib.request.Request(BASE + "/contacts/import", data=body, method="POST")
    req.add_header("Authorization", f"Bearer {key}")
    req.add_header("Content-Type", ctype)
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())["jobId"]


def start_campaign(key):
    st, c = until_answered("POST", "/campaigns", key, {"name": "crash", "subject": "News", "body": "<p>News</p>",
                                                       "from": "news@mail.example.net", "audienceType": "ALL"})
    assert st == 201, c
    st, b = until_answered("POST", f"/campaigns/{unwrap(c)['id']}/send", key, {})
    assert st in (200, 202), b
    return unwrap(c)["id"]


# ---------------------------------------------------------------------------- one database
def paged(key, path):
    """Every item of a cursor-paginated list."""
    items, cursor = [], None
    while True:
        sep = "&" if "?" in path else "?"
        st, b = until_answered("GET", f"{path}{sep}limit=100" + (f"&cursor={cursor}" if cursor else ""), key)
        items += b["data"]
        cursor = b.get("cursor")
        if not b.get("hasMore") or not cursor:
            return items


def unwrap(b):
    """The object of a `{ data }` answer, or the answer itself."""
    return b["data"] if isinstance(b, dict) and isinstance(b.get("data"), dict) else b


def run_on(label, url, work):
    print(f"### {label}: {CRASHES} crashes")
    failures_before = len(FAILURES)
    with RECEIVED_LOCK:
        RECEIVED.clear()
    init = json.loads(subprocess.run([BIN, "init", "--json", "--database-url", url, "--data-dir", work],
                                     capture_output=True, text=True, check=True).stdout)
    key, tag = init["secretKey"], label.lower()
    server = Server(url, work)
    server.start()
    wf = setup(key, tag)
    job = start_import(key, tag, 3000)
    load = Load(key, tag)
    threads = [threading.Thread(target=load.sends, args=(i,)) for i in range(3)] + [threading.Thread(target=load.tracks)]
    [t.start() for t in threads]
    campaign = None
    rng = random.Random(CRASHES)
    for crash in range(CRASHES):
        time.sleep(rng.uniform(0.5, 2.5))
        if crash == 1:
            campaign = start_campaign(key)
            time.sleep(rng.uniform(0.0, 0.5))
        if PG_RESTARTS and label == "PostgreSQL" and crash % 2:
            # The database crashes instead, under the running server (immediate shutdown: no
            # checkpoint, in-flight transactions lost), and comes back.
            subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", "-m", "immediate", PG_CLUSTER[0], PG_CLUSTER[1], "restart"],
                           check=True, capture_output=True)
            continue
        server.kill()
        time.sleep(rng.uniform(0.0, 0.3))
        server.start()
    time.sleep(1)
    load.stop.set()
    [t.join() for t in threads]
    print(f"accepted {len(load.accepted)} emails and {len(load.tracked)} tracks across {CRASHES} crashes; waiting for the rest")

    # Finished: no email queued, no execution active, the import and the campaign done.
    deadline = time.time() + 5 * LEASE + 120
    while time.time() < deadline:
        st, up = until_answered("GET", "/activity/upcoming", key)
        active = [e for s in ("RUNNING", "WAITING") for e in paged(key, f"/workflows/{wf}/executions?status={s}")]
        st, imp = until_answered("GET", f"/contacts/import/{job}", key)
        st, c = until_answered("GET", f"/campaigns/{campaign}", key)
        if up["queuedEmails"] == 0 and not active and imp["state"] in ("completed", "failed") and unwrap(c)["status"] == "SENT":
            break
        time.sleep(1)
    else:
        fail(f"{label}: not finished {5 * LEASE + 120} s after the load: {up['queuedEmails']} emails queued, "
             f"{len(active)} executions active, import {imp['state']}, campaign {unwrap(c)['status']}")
    time.sleep(1)  # the last hand-offs' outcomes

    # Every accepted email sent, and received.
    not_sent = collections.Counter()
    for eid in load.accepted:
        st, e = until_answered("GET", f"/emails/{eid}", key)
        if st != 200 or unwrap(e)["status"] not in ("sent", "delivered"):
            not_sent[unwrap(e)["status"] if st == 200 else st] += 1
    if not_sent:
        fail(f"{label}: accepted emails not sent: {dict(not_sent)}")
    with RECEIVED_LOCK:
        received = dict(RECEIVED)
    ids = {m.split("@")[0]: n for m, n in received.items() if m}
    lost = [eid for eid in load.accepted if eid not in ids]
    if lost:
        fail(f"{label}: {len(lost)} accepted emails never reached the SMTP server, e.g. {lost[:3]}")

    # Every accepted track: one execution, completed, and its email.
    executions = paged(key, f"/workflows/{wf}/executions")
    by_contact = collections.Counter(x["contactId"] for x in executions)
    statuses = collections.Counter(x["status"] for x in executions)
    if any(s != "COMPLETED" and s != "EXITED" for s in statuses):
        fail(f"{label}: executions not completed: {dict(statuses)}")
    missing = 0
    for email in load.tracked:
        st, b = until_answered("GET", f"/contacts?search={email}&limit=1", key)
        if not b["data"] or by_contact[b["data"][0]["id"]] != 1:
            missing += 1
    if missing:
        fail(f"{label}: {missing} of {len(load.tracked)} accepted tracks without exactly one execution")

    # The import and the campaign.
    st, imp = until_answered("GET", f"/contacts/import/{job}", key)
    if imp["state"] != "completed" or (imp.get("result") or {}).get("succeeded") != 3000:
        fail(f"{label}: import {imp['state']}: {str(imp.get('result'))[:300]}")
    st, stats = until_answered("GET", f"/campaigns/{campaign}/stats", key)
    st, c = until_answered("GET", f"/campaigns/{campaign}", key)
    stats = unwrap(stats)
    print(f"campaign {unwrap(c)['status']}: {stats['recipients']} recipients, {stats['sent']} sent, "
          f"{stats['queued']} queued, {stats['failed']} failed")
    if unwrap(c)["status"] != "SENT" or stats["sent"] != stats["recipients"] or stats["recipients"] == 0:
        fail(f"{label}: campaign {unwrap(c)['status']}: {json.dumps(stats)[:300]}")

    # Duplicates: each is a batch re-delivered after a crash in its window.
    dupes = {m: n for m, n in received.items() if n > 1}
    bound = CRASHES * JOBS * BATCH
    print(f"received {sum(received.values())} messages, {len(received)} distinct; "
          f"{sum(n - 1 for n in dupes.values())} copies more of {len(dupes)} (bound {bound})")
    if sum(n - 1 for n in dupes.values()) > bound:
        fail(f"{label}: more copies than {CRASHES} crashes can cause")

    server.stop()
    panics = [l for l in open(os.path.join(work, "server.log")) if "panicked" in l]
    # Counted by what they say: timestamps, ids and numbers left out.
    errors = collections.Counter(re.sub(r"[0-9]+(\.[0-9]+)?", "N", re.sub(r"\b[a-z]{3}_[0-9a-f]{32}\b", "ID", l.strip().split(" ", 1)[-1]))[:200]
                                 for l in open(os.path.join(work, "server.log")) if "ERROR" in l)
    for l, n in errors.most_common(15):
        print(f"server ({n}x): {l}")
    if panics:
        fail(f"{label}: panics: {panics[:3]}")
    return len(FAILURES) - failures_before


def main():
    if not os.access(BIN, os.X_OK):
        sys.exit(f"{BIN} is missing: cargo build --release --bin herald")
    smtp = SmtpServer(("127.0.0.1", SMTP_PORT), Smtp)
    threading.Thread(target=smtp.serve_forever, daemon=True).start()
    for label, database in databases.each("h_crashes"):
        with database() as (url, work):
            run_on(label, url, work)
    if UNAVAILABLE:
        print("503 SERVICE_UNAVAILABLE (asked again):", dict(UNAVAILABLE))
    print("failures:", len(FAILURES))
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
