#!/usr/bin/env python3
"""Time from spawning `herald serve` to its first 200 on /ready, on SQLite.

Each "first" start gets a fresh data directory (no database, no plugin cache); each "warm" start
reuses the directory of the previous first start (database and migrations there). The warm
start is the floor a first start can reach. Polls /ready every millisecond over a raw socket.

Usage: host/benches/first_start/run.py [runs, default 10] (needs a release build).
"""
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.abspath(__file__)) + "/../../.."
BIN = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")) + "/release/herald"
PORT = 18191


def ready():
    try:
        with socket.create_connection(("127.0.0.1", PORT), timeout=0.05) as s:
            s.sendall(b"GET /ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return s.recv(16).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


def start(data_dir):
    began = time.perf_counter()
    proc = subprocess.Popen(
        [BIN, "serve", "--listen", f"127.0.0.1:{PORT}", "--data-dir", data_dir],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    while not ready():
        if proc.poll() is not None:
            sys.exit(f"herald exited with {proc.returncode}")
        if time.perf_counter() - began > 30:
            sys.exit("not ready after 30 s")
        time.sleep(0.001)
    took = (time.perf_counter() - began) * 1000
    proc.terminate()
    proc.wait()
    return took


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    first, warm, cached = [], [], []
    for _ in range(runs):
        d = tempfile.mkdtemp()
        first.append(start(d))
        cached.append(os.path.isdir(os.path.join(d, "plugin-cache")))
        warm.append(start(d))
        shutil.rmtree(d)
    for name, xs in (("first start", first), ("warm start", warm)):
        print(f"{name}: median {statistics.median(xs):.1f} ms, min {min(xs):.1f}, max {max(xs):.1f} ({runs} runs)")
    print(f"first starts that compiled a plugin: {sum(cached)} of {runs}")


if __name__ == "__main__":
    main()
