"""The fresh databases the hostile probes run a server on: SQLite in a temporary directory, then
a PostgreSQL database of its own (`HERALD_BENCH_POSTGRES`, 127.0.0.1:5432 by default), each
dropped afterwards. `ONLY=sqlite` or `ONLY=postgres` keeps one."""
import contextlib, os, shutil, subprocess, tempfile, time

PG = os.environ.get("HERALD_BENCH_POSTGRES", "postgres://postgres@127.0.0.1:5432")


@contextlib.contextmanager
def _sqlite():
    work = tempfile.mkdtemp()
    try:
        yield f"sqlite://{work}/herald.db", work
    finally:
        shutil.rmtree(work, ignore_errors=True)


@contextlib.contextmanager
def _postgres(prefix):
    name = f"{prefix}_{int(time.time())}"
    subprocess.run(["psql", f"{PG}/postgres", "-qc", f"CREATE DATABASE {name}"], check=True, capture_output=True)
    work = tempfile.mkdtemp()
    try:
        yield f"{PG}/{name}", work
    finally:
        shutil.rmtree(work, ignore_errors=True)
        subprocess.run(["psql", f"{PG}/postgres", "-qc", f"DROP DATABASE {name}"], capture_output=True)


def each(prefix):
    """(label, database URL, data directory) of each database to run on, as context managers'
    values: `for label, open_ in each("h_races"): with open_() as (url, work): …`."""
    only = os.environ.get("ONLY", "")
    if only not in ("", "sqlite", "postgres"):
        raise SystemExit("ONLY is sqlite or postgres")
    if only != "postgres":
        yield "SQLite", _sqlite
    if only != "sqlite":
        yield "PostgreSQL", lambda: _postgres(prefix)
