#!/usr/bin/env python3
"""The batch-API transports end to end (`postmark`, `resend`), beside the `smtp` transport into
an SMTP sink in the same run, on SQLite (and PostgreSQL when reachable), against a release build.

Each provider is stood for by a loopback double (this script run as `--double PROVIDER PORT`, a
stdlib ThreadingHTTPServer with keep-alive, in its own process) that checks what the provider
checks and answers in its format, counting the calls and the messages it received
(`GET /count`):

- `postmark`: `POST /email/batch`, the `X-Postmark-Server-Token` header (401, ErrorCode 10, for
  another), JSON in and out (415 otherwise), at most 500 messages a call (422, ErrorCode 300,
  beyond); each message needs `From`, `To`, a body and `MessageStream`; answers a JSON array of
  `{ErrorCode: 0, Message: "OK", MessageID, SubmittedAt, To}`.
- `resend`: `POST /emails/batch` (and `POST /emails`), `Authorization: Bearer <key>` (401
  `missing_api_key`, 403 `invalid_api_key`), JSON, at most 100 emails a call and no attachments
  (422 `validation_error`); each email needs `from`, `to`, `subject` and `html` or `text`;
  answers `{data: [{id}]}` (with `errors: []` in `x-batch-validation: permissive`).

For each database and each transport (`smtp` first: the ceiling, then `postmark`, `resend`):
`herald init` makes a project (its open and click tracking turned off by SQL), then
`herald serve` runs with that transport (`HERALD_PLUGINS__TRANSPORT`; for a provider its
`api_base` at its double, its key, and `plugins.transport_http_allow_private = true`), the
settings of `smtp/submission.py` (32 delivery batches at once, workers polling every 20 ms, no
rate limits, unverified senders allowed so the mail goes unsigned, an SMTP pool of 16) and
`sending.batch_size` 50 (the default; `BATCH_SIZE=500` changes it). N requests of one recipient
each go to POST /v1/send over 32 concurrent keep-alive HTTP clients; the time runs from the first
request until the double (or the sink) has received all N. Printed: emails/s end to end, the
calls the double received and their mean batch size, and the server's peak RSS (VmHWM).

The aim (issue 77, item 4): ≥ 1,000 emails/s end to end for the batch APIs on 2 cores.

Usage: host/benches/transports/run.py [N, default 20000]
       BACKEND=sqlite host/benches/transports/run.py 20000   # SQLite only
Needs a release build (cargo build --release; CARGO_TARGET_DIR is honoured; HERALD_BIN runs
another binary), and psql with PostgreSQL on 127.0.0.1:5432 for the PostgreSQL run.
"""
import datetime
import http.client
import json
import os
import shutil
import subprocess
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common import (  # noqa: E402
    CLIENTS, PG, http_clients, hwm, init, note, serve, sink_count, smtp_env, spawn, start_sink, stop,
    timed, wait_count, with_pg,
)

PORT = 18296
SINK_PORT = 18128
DOUBLES = {"postmark": 18481, "resend": 18482}
POSTMARK_TOKEN = "pm-bench-server-token"
RESEND_KEY = "re_bench_key"
BATCH_SIZE = os.environ.get("BATCH_SIZE", "50")
N = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1] != "--double" else 20_000
AIM = 1_000
STALL = 30  # seconds without a message received before a run is given up as stuck


# --- The doubles ----------------------------------------------------------------------------

class Double(BaseHTTPRequestHandler):
    """One provider's batch API; `counts` is shared by the server's threads."""
    protocol_version = "HTTP/1.1"
    provider = None
    counts = {"calls": 0, "messages": 0, "accepted": 0, "refused_calls": 0, "last_refusal": None}
    lock = threading.Lock()

    def log_message(self, *args):
        pass

    def reply(self, status, value):
        body = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def refuse(self, status, value):
        with self.lock:
            self.counts["refused_calls"] += 1
            self.counts["last_refusal"] = f"{status} {json.dumps(value)[:300]}"
        self.reply(status, value)

    def body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length", 0)))

    def is_json(self, header):
        return "application/json" in self.headers.get(header, "").lower()

    def received(self, messages, accepted):
        with self.lock:
            self.counts["calls"] += 1
            self.counts["messages"] += messages
            self.counts["accepted"] += accepted

    def do_GET(self):
        if self.path == "/count":
            with self.lock:
                counts = dict(self.counts)
            return self.reply(200, counts)
        self.reply(404, {"message": "not found"})

    def do_POST(self):
        raw = self.body()
        if self.provider == "postmark":
            self.postmark(raw)
        else:
            self.resend(raw)

    # Postmark: https://postmarkapp.com/developer/user-guide/send-email-with-api/batch-emails
    def postmark(self, raw):
        def error(status, code, message):
            self.refuse(status, {"ErrorCode": code, "Message": message})

        if self.path != "/email/batch":
            return error(404, 404, f"No endpoint at {self.path}.")
        if self.headers.get("X-Postmark-Server-Token") != POSTMARK_TOKEN:
            return error(401, 10, "The Server Token you provided in the X-Postmark-Server-Token "
                                  "request header was invalid.")
        if not self.is_json("Accept") or not self.is_json("Content-Type"):
            return error(415, 0, "Accept and Content-Type must be application/json.")
        try:
            messages = json.loads(raw)
        except ValueError:
            messages = None
        if not isinstance(messages, list):
            return error(422, 402, "Received invalid JSON input.")
        if len(messages) > 500:
            return error(422, 300, "Invalid email request: at most 500 messages may be sent in "
                                   "one batch.")
        answers = []
        now = datetime.datetime.now(datetime.timezone.utc).isoformat()
        for m in messages:
            to = m.get("To") or "" if isinstance(m, dict) else ""
            if not to or not m.get("From") or not (m.get("HtmlBody") or m.get("TextBody")):
                answers.append({"ErrorCode": 300, "To": to, "Message": "Invalid email request: "
                                "From, To and a body are required."})
            elif not isinstance(m.get("MessageStream"), str):
                answers.append({"ErrorCode": 1235, "To": to, "Message": "The message stream "
                                "for the provided 'ID' was not found."})
            else:
                answers.append({"ErrorCode": 0, "Message": "OK", "MessageID": str(uuid.uuid4()),
                                "SubmittedAt": now, "To": to})
        self.received(len(messages), sum(1 for a in answers if a["ErrorCode"] == 0))
        self.reply(200, answers)

    # Resend: https://resend.com/docs/api-reference/emails/send-batch-emails
    def resend(self, raw):
        def error(status, name, message):
            self.refuse(status, {"statusCode": status, "name": name, "message": message})

        if self.path not in ("/emails/batch", "/emails"):
            return error(404, "not_found", f"No endpoint at {self.path}.")
        auth = self.headers.get("Authorization")
        if auth is None:
            return error(401, "missing_api_key", "Missing API key in the authorization header.")
        if auth != f"Bearer {RESEND_KEY}":
            return error(403, "invalid_api_key", "API key is invalid")
        if not self.is_json("Content-Type"):
            return error(422, "validation_error", "Content-Type must be application/json")
        try:
            body = json.loads(raw)
        except ValueError:
            body = None

        def invalid(email):
            if not isinstance(email, dict):
                return "An email must be an object."
            to = email.get("to")
            to = [to] if isinstance(to, str) else to if isinstance(to, list) else []
            if not email.get("from") or not to:
                return "The `from` and `to` fields are required."
            if not isinstance(email.get("subject"), str):
                return "The `subject` field is required."
            if not isinstance(email.get("html"), str) and not isinstance(email.get("text"), str):
                return "Either `html` or `text` is required."
            return None

        if self.path == "/emails":
            if not isinstance(body, dict):
                return error(422, "validation_error", "The body must be an email object.")
            why = invalid(body)
            if why:
                return error(422, "validation_error", why)
            self.received(1, 1)
            return self.reply(200, {"id": str(uuid.uuid4())})
        if not isinstance(body, list):
            return error(422, "validation_error", "The batch must be a list of emails.")
        if len(body) > 100:
            return error(422, "validation_error", "Too many emails in the batch: at most 100.")
        if any(isinstance(e, dict) and "attachments" in e for e in body):
            return error(422, "validation_error",
                         "The `attachments` field is not supported in batch emails.")
        permissive = self.headers.get("x-batch-validation") == "permissive"
        data, errors = [], []
        for index, email in enumerate(body):
            why = invalid(email)
            if why and not permissive:
                return error(422, "validation_error", why)
            if why:
                errors.append({"index": index, "message": why})
            else:
                data.append({"id": str(uuid.uuid4())})
        self.received(len(body), len(data))
        self.reply(200, {"data": data, "errors": errors} if permissive else {"data": data})


def double(provider, port):
    Double.provider = provider
    server = ThreadingHTTPServer(("127.0.0.1", port), Double)
    server.daemon_threads = True
    server.request_queue_size = 1024
    server.serve_forever()


def double_count(provider):
    """The double's counts: calls, messages (received, accepted or not), accepted,
    refused_calls, last_refusal."""
    conn = http.client.HTTPConnection("127.0.0.1", DOUBLES[provider], timeout=30)
    try:
        conn.request("GET", "/count")
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


def start_double(provider):
    """The double of `provider` in a process of its own, once it answers."""
    return spawn(__file__, ["--double", provider, DOUBLES[provider]],
                 lambda: double_count(provider))


# --- The runs -------------------------------------------------------------------------------

def transport_env(transport):
    if transport == "smtp":
        return smtp_env(SINK_PORT)
    key = {"postmark": ("SERVER_TOKEN", POSTMARK_TOKEN), "resend": ("API_KEY", RESEND_KEY)}
    name, value = key[transport]
    prefix = f"HERALD_PLUGINS__SETTINGS__{transport.upper()}__"
    return {
        "HERALD_PLUGINS__TRANSPORT": transport,
        prefix + "API_BASE": f"http://127.0.0.1:{DOUBLES[transport]}",
        prefix + name: value,
        "HERALD_PLUGINS__TRANSPORT_HTTP_ALLOW_PRIVATE": "true",
    }


ROWS = []


def bench(name, transport, url, n):
    data, url, db, key, project = init(url)
    settings = dict(transport_env(transport), HERALD_SENDING__BATCH_SIZE=BATCH_SIZE)
    server = None
    try:
        server = serve(PORT, data, url, settings)
        if transport == "smtp":
            def count():
                return sink_count(SINK_PORT)
        else:
            def count():
                return double_count(transport)["messages"]
        before = None if transport == "smtp" else double_count(transport)
        took, answered, got, refused = timed(lambda: http_clients(PORT, key, transport, n), n,
                                             count, stall=STALL)
        rss = hwm(server.pid)
        calls = None
        line = f"- {transport}: {took:.1f} s (last answer at {answered:.1f} s), {got:,} received"
        if before is not None:
            after = double_count(transport)
            calls = after["calls"] - before["calls"]
            accepted = after["accepted"] - before["accepted"]
            line += f" in {calls:,} calls, {accepted:,} accepted"
            if after["refused_calls"] > before["refused_calls"]:
                line += (f"; {after['refused_calls'] - before['refused_calls']} calls refused, "
                         f"the last: {after['last_refusal']}")
        print(line + note(refused))
        # The outcomes are committed just after the hand-off: wait for them (up to 30 s).
        queued = f"SELECT COUNT(*) FROM emails WHERE project_id = '{project}' AND status = 'queued'"
        wait_count(lambda: -int(db.run(queued)), 0, deadline=30)
        statuses = db.run(
            "SELECT STRING_AGG(status || ' ' || n, ', ') FROM (SELECT status, COUNT(*) AS n "
            f"FROM emails WHERE project_id = '{project}' GROUP BY status ORDER BY status) s"
            if url.startswith("postgres") else
            "SELECT GROUP_CONCAT(status || ' ' || n, ', ') FROM (SELECT status, COUNT(*) AS n "
            f"FROM emails WHERE project_id = '{project}' GROUP BY status ORDER BY status)"
        )
        print(f"  rows: {statuses or 'none'} (of {n:,})")
        ROWS.append((name, transport, got, took, answered, calls, rss))
    finally:
        stop(server)
        shutil.rmtree(data, ignore_errors=True)


def backend(name, url_for, n):
    """The three transports on one database; `url_for(transport, run)` runs `run(url)`."""
    print(f"### {name}: {n:,} emails a transport, {CLIENTS} concurrent clients, "
          f"sending.batch_size {BATCH_SIZE}")
    for transport in ("smtp", *DOUBLES):
        url_for(transport, lambda url, t=transport: bench(name, t, url, n))


def pg_reachable():
    try:
        return subprocess.run(["psql", f"{PG}/postgres", "-qAtc", "SELECT 1"],
                              capture_output=True).returncode == 0
    except FileNotFoundError:
        return False


def table():
    print()
    print("| database | transport | emails received | seconds to the last received "
          "| emails/s end to end | calls the double received (mean batch) "
          "| clients' last answer at | server peak RSS |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name, transport, got, took, answered, calls, rss in ROWS:
        path = "smtp → sink (ceiling)" if transport == "smtp" else f"{transport} → double"
        batches = "—" if calls is None else f"{calls:,} ({got / calls:,.1f})" if calls else "0"
        print(f"| {name} | {path} | {got:,} | {took:.2f} s | {got / took:,.0f} | {batches} "
              f"| {answered:.2f} s | {rss:.0f} MiB |")
    print()
    cores = len(os.sched_getaffinity(0))
    print(f"Aim (issue 77, item 4): ≥ {AIM:,} emails/s end to end for the batch APIs on 2 cores "
          f"(this machine: {cores} cores; a release build to count):")
    for name, transport, got, took, _, _, _ in ROWS:
        if transport != "smtp":
            rate = got / took
            print(f"- {name} {transport}: {rate:,.0f} emails/s: "
                  f"{'met' if rate >= AIM else 'below'}")


def main():
    procs = [start_sink(SINK_PORT)] + [start_double(p) for p in DOUBLES]
    try:
        backend("SQLite", lambda transport, run: run(None), N)
        if os.environ.get("BACKEND") != "sqlite":
            if pg_reachable():
                backend("PostgreSQL", lambda transport, run: with_pg(run, f"tr_{transport}"), N)
            else:
                print("### PostgreSQL: not reachable on 127.0.0.1:5432; skipped")
        table()
    finally:
        for p in procs:
            p.terminate()
            p.wait()


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[1] == "--double":
        double(sys.argv[2], int(sys.argv[3]))
    else:
        main()
