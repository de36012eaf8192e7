#!/usr/bin/env python3
"""Slow clients (slowloris) against a fresh `herald serve` on SQLite whose open-files limit is
1,024 (`prlimit`), as many services start: N connections from 127.0.0.2, each with a request
head stopped half-way, then a request from 127.0.0.1 while they are held, the server's CPU over
two seconds, and a request after the idle timeout (5 s here).

    host/benches/hostile/slow_clients.py BIN [N] [CAP]   # CAP: http_max_connections_per_ip
    host/benches/hostile/slow_clients.py target/release/herald 1100 0
"""
import socket, subprocess, sys, tempfile, time, urllib.request, os
BIN=sys.argv[1]; N=int(sys.argv[2]) if len(sys.argv) > 2 else 1100; PORT=18191; CAP=sys.argv[3] if len(sys.argv) > 3 else "256"
work=tempfile.mkdtemp(); url=f"sqlite://{work}/h.db"
subprocess.run([BIN,"init","--json","--database-url",url,"--data-dir",work],capture_output=True,check=True)
log=open(f"{work}/log","w")
p=subprocess.Popen(["prlimit","--nofile=1024:1024",BIN,"serve","--listen",f"127.0.0.1:{PORT}","--database-url",url,"--data-dir",work],stderr=log,env=dict(os.environ,HERALD_LOG="warn",HERALD_HTTP_IDLE_TIMEOUT_SECONDS="5",HERALD_HTTP_MAX_CONNECTIONS_PER_IP=CAP))
for _ in range(100):
    try: urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health",timeout=1); break
    except OSError: time.sleep(0.1)
socks=[]
for i in range(N):
    s=socket.socket(); s.bind(("127.0.0.2",0)); s.connect(("127.0.0.1",PORT)); s.send(b"GET /health HTTP/1.1\r\nHost: x\r\n"); socks.append(s)
print("opened",len(socks))
def cpu(): 
    f=open(f"/proc/{p.pid}/stat").read().split(")")[1].split(); return (int(f[11])+int(f[12]))/os.sysconf("SC_CLK_TCK")
c0=cpu(); t0=time.time()
try:
    r=urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health",timeout=3); print("health during:",r.status)
except Exception as e: print("health during failed:",e)
time.sleep(2)
print(f"server CPU while held: {(cpu()-c0)/(time.time()-t0):.2f} cores")
time.sleep(5)
t=time.time()
try:
    r=urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health",timeout=10); print("health after idle timeout:",r.status, f"{time.time()-t:.2f}s")
except Exception as e: print("health after failed:",e)
p.terminate(); p.wait()
print([l[:200] for l in open(f"{work}/log") if "WARN" in l][:4])
