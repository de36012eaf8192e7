"""Concurrent logins against a running server (limits raised by `.ci/with-server`), measuring the
server's resident memory (`/proc/<pid>/status`) before and at its peak; `N` concurrent logins
(default 600), after 600 concurrent `/health` as a baseline:

    N=600 .ci/with-server "" -- python3 host/benches/hostile/logins.py

Figures are in docs/benchmarks.md.
"""
import json, os, threading, time, urllib.request, subprocess
BASE = os.environ["HERALD_URL"]
port = BASE.rsplit(":",1)[1]
pid = subprocess.check_output(["bash","-c",f"ss -ltnp | grep ':{port} ' | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2"]).decode().strip()
def rss():
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmRSS:"): return int(l.split()[1])//1024
def post(path, body):
    r = urllib.request.Request(BASE+path, data=json.dumps(body).encode(), method="POST"); r.add_header("content-type","application/json")
    try: return urllib.request.urlopen(r, timeout=120).status
    except urllib.error.HTTPError as e: return e.code
post("/auth/signup", {"email":"ann@example.com","password":"correct horse battery"})
def burst(fn, n=600):
    peak=[rss()]; stop=[False]
    def watch():
        while not stop[0]: peak.append(rss()); time.sleep(0.005)
    w=threading.Thread(target=watch); w.start()
    ts=[threading.Thread(target=fn) for _ in range(n)]; t=time.time()
    [x.start() for x in ts]; [x.join() for x in ts]; stop[0]=True; w.join()
    return time.time()-t, max(peak)
base=rss()
dt, peak = burst(lambda: urllib.request.urlopen(BASE+"/health").read())
print(f"600 concurrent /health: {dt:.1f}s, server RSS {base} -> peak {peak} MiB")
base=rss()
dt, peak = burst(lambda: post("/auth/login", {"email":"ann@example.com","password":"wrong password"}), int(os.environ.get("N","600")))
print(f"{os.environ.get('N', '600')} concurrent logins: {dt:.1f}s, server RSS {base} -> peak {peak} MiB")
