"""Hostile input to `/v1/send` against a running server, with a `/health` loop alongside: each
input's answer and time, and how `/health` fared meanwhile. Run it through the server wrapper:

    cargo build --release --bin herald
    HERALD_BIN=target/release/herald .ci/with-server "" -- python3 host/benches/hostile/run.py

(`.ci/with-server` starts a fresh server with unverified sending allowed, so the bodies reach
rendering, and sets HERALD_URL.) Figures are in docs/benchmarks.md.
"""
import json, os, threading, time, urllib.request, http.cookiejar
BASE = os.environ["HERALD_URL"]
def req(method, path, body=None, key=None, cookies=None, timeout=60):
    data = json.dumps(body).encode() if body is not None else None
    r = urllib.request.Request(BASE + path, data=data, method=method)
    if data is not None: r.add_header("content-type", "application/json")
    if key: r.add_header("authorization", "Bearer " + key)
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(cookies)) if cookies is not None else urllib.request.build_opener()
    t = time.time()
    try:
        resp = opener.open(r, timeout=timeout); code = resp.status; resp.read()
    except urllib.error.HTTPError as e:
        code = e.code; e.read()
    return code, time.time() - t
jar = http.cookiejar.CookieJar()
req("POST", "/auth/signup", {"email": "rel@example.com", "password": "correct horse battery"}, cookies=jar)
opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
r = urllib.request.Request(BASE + "/users/@me/projects", data=json.dumps({"name": "rel"}).encode(), method="POST")
r.add_header("content-type", "application/json")
sk = json.loads(opener.open(r).read())["secretKey"]
def send(subject, body, data=None):
    return {"to": "ann@example.com", "from": "hello@unverified.test", "subject": subject, "body": body, "data": data or {}}
lst = list(range(1000))
cases = [
    ("150,000 unclosed `<a` (300 KB body)", send("s", "<a" * 150000)),
    ("`{{a ?? b}}` x 60,000", send("s", "{{a ?? b}}" * 60000)),
    ("`{{a ?? b}}` x 5,000", send("s", "{{a ?? b}}" * 5000)),
    ("three nested #each over 1,000 items", send("s", "{{#each l}}{{#each ../l}}{{#each ../../l}}x{{/each}}{{/each}}{{/each}}", {"l": {"value": lst, "persistent": False}})),
    ("50,000 nested {{#if}}", send("s", "{{#if a}}" * 50000 + "x" + "{{/if}}" * 50000)),
    ("a 41 MB rendering", send("s", "{{#each l}}" + "x" * 41000 + "{{/each}}", {"l": {"value": lst, "persistent": False}})),
]
health = []
stop = False
def loop():
    while not stop:
        health.append(req("GET", "/health")[1]); time.sleep(0.01)
th = threading.Thread(target=loop); th.start()
for name, body in cases:
    code, dt = req("POST", "/v1/send", body, key=sk)
    print(f"| {name} | {code} | {dt*1000:.0f} ms |")
stop = True; th.join()
health.sort()
print(f"/health during the run: {len(health)} requests, median {health[len(health)//2]*1000:.1f} ms, slowest {health[-1]*1000:.1f} ms")
