#!/usr/bin/env python3
"""What the SQLite contact search index (`contacts_search`, FTS5 trigrams kept by triggers)
costs a contact's insert, beside its ceiling: the same inserts without the index's triggers.

`herald init` makes a fresh SQLite database with every migration; the script copies it twice,
drops the three `contacts_search_*` triggers in one copy, and in each inserts N contacts
(`c<number>@example.com`, as the segments bench writes them) in transactions of B rows (B=1 is a
contact a transaction, the shape of `/v1/send` and `/v1/track` writes at low load; B=500 the
group commit's and an import's), in alternating rounds, and prints µs a contact for each.

Usage: host/benches/segments/search_index_cost.py [N, default 50000] [ROUNDS, default 3]
(HERALD_BIN names the binary; any build: the schema is the migrations'.)
"""
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.abspath(__file__)) + "/../../.."
BIN = os.environ.get("HERALD_BIN") or (
    os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")) + "/release/herald"
)
N = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3


def insert(path, project, batch, offset):
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode = WAL")
    con.execute("PRAGMA synchronous = NORMAL")
    now = int(time.time() * 1000)
    t = time.perf_counter()
    for start in range(0, N, batch):
        con.execute("BEGIN IMMEDIATE")
        con.executemany(
            "INSERT INTO contacts (id, project_id, email, subscribed, data, version, created_at, updated_at) "
            "VALUES (?, ?, ?, 1, '{}', 0, ?, ?)",
            [
                (f"cnt_{offset + g:032x}", project, f"c{offset + g}@example.com", now, now)
                for g in range(start, min(start + batch, N))
            ],
        )
        con.execute("COMMIT")
    took = time.perf_counter() - t
    con.close()
    return took / N * 1e6


def main():
    if not os.access(BIN, os.X_OK):
        sys.exit(f"{BIN} is missing: cargo build --release")
    work = tempfile.mkdtemp()
    try:
        base = f"{work}/herald.db"
        init = subprocess.run(
            [BIN, "init", "--json", "--database-url", f"sqlite://{base}", "--data-dir", work],
            capture_output=True, text=True, check=True,
        )
        project = json.loads(init.stdout)["projectId"]
        with_index, without = f"{work}/with.db", f"{work}/without.db"
        for path in (with_index, without):
            src = sqlite3.connect(base)
            dst = sqlite3.connect(path)
            src.backup(dst)
            src.close()
            dst.close()
        con = sqlite3.connect(without)
        for trigger in ("insert", "delete", "update"):
            con.execute(f"DROP TRIGGER contacts_search_{trigger}")
        con.commit()
        con.close()
        print(f"SQLite {sqlite3.sqlite_version} (Python's; Herald bundles its own), {N:,} contacts a round")
        for i, batch in enumerate((1, 500)):
            cost = {with_index: [], without: []}
            for r in range(ROUNDS):
                for path in (without, with_index):
                    cost[path].append(insert(path, project, batch, (i * ROUNDS + r + 1) * N))
            a, b = statistics.median(cost[with_index]), statistics.median(cost[without])
            print(f"{batch} a transaction: {a:.1f} µs a contact with the search index, "
                  f"{b:.1f} µs without (ceiling): +{(a / b - 1) * 100:.0f} %")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
