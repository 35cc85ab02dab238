"""Offline diagnosis on the production path, against a bare graph on the same checkpointer.

The real side is what ``superbiz diagnose --offline`` runs: ``open_persistence`` (the SQL
ledger, audit store, run locks and leases, LangGraph's checkpointer on the same database), the
graph built as the command line builds it, and ``graph.runner.run_diagnosis`` (thread lock,
lease, guard). The bare side is a linear graph of trivial nodes with as many super-steps,
compiled on the *same checkpointer object*. Both run in one process, alternating, on SQLite and
on PostgreSQL; medians and p10/p90 are printed.

PostgreSQL round trips per diagnosis are counted by a loopback TCP proxy between the process
and the server: one round trip is the client sending after it last received (a pipelined batch
counts once).

Targets: at most 1.5x on each database; at most 90 PostgreSQL round trips per diagnosis.

    .venv/bin/python bench/production_path.py [--runs N] [--quick] [--backends sqlite,postgres]
        [--profile BACKEND]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import pstats
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import fmt, machine, median, percentile, table, throwaway_postgres, verdict_line
from psycopg.conninfo import conninfo_to_dict, make_conninfo

TARGET_RATIO = 1.5
TARGET_TRIPS = 90
QUESTION = "Is order-service returning HTTP 500 errors, and why?"


# --------------------------------------------------------------------------- counting proxy


class CountingProxy:
    """A loopback TCP proxy that counts request/response round trips of every connection."""

    def __init__(self, host: str, port: int) -> None:
        self._upstream = (host, port)
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._server.getsockname()[1])
        self._lock = threading.Lock()
        self.trips = 0
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self._upstream)
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            last = ["server"]
            threading.Thread(
                target=self._pipe, args=(client, upstream, "client", last), daemon=True
            ).start()
            threading.Thread(
                target=self._pipe, args=(upstream, client, "server", last), daemon=True
            ).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, side: str, last: list[str]) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                with self._lock:
                    if side == "client" and last[0] != "client":
                        self.trips += 1
                    last[0] = side
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Stop accepting connections."""
        self._closed = True
        self._server.close()


# --------------------------------------------------------------------------- the two sides


@dataclass
class Side:
    """One database: the production persistence, the real and bare graphs, the counters."""

    name: str
    persistence: Any
    real: Any
    bare: Any
    context: Any
    proxy: CountingProxy | None = None
    steps: int = 0


@contextlib.contextmanager
def opened(name: str) -> Iterator[Side]:
    """The production persistence of ``name`` (``sqlite`` or ``postgres``) and both graphs."""
    from apps.resuming import environment_ref
    from evidence.composed import configured_backend
    from graph.compile import compile_graph
    from persistence.store import open_persistence
    from state.context import Context

    with contextlib.ExitStack() as stack:
        proxy: CountingProxy | None = None
        if name == "sqlite":
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-prod-"))
            url = f"sqlite:///{Path(folder) / 'superbiz.sqlite'}"
        elif name == "postgres":
            conninfo = stack.enter_context(throwaway_postgres())
            params = conninfo_to_dict(conninfo)
            proxy = CountingProxy(
                str(params.get("host", "127.0.0.1")), int(params.get("port", 5432))
            )
            stack.callback(proxy.close)
            proxied = make_conninfo(conninfo, host="127.0.0.1", port=str(proxy.port))
            params = conninfo_to_dict(proxied)
            url = (
                f"postgresql://{params.get('user', 'postgres')}@127.0.0.1:{proxy.port}/"
                f"{params['dbname']}"
            )
        else:
            raise ValueError(f"unknown backend {name!r}")
        persistence = open_persistence(url)
        stack.callback(persistence.close)
        backend = configured_backend(database=url, progress=None)
        real = compile_graph(persistence, backend, environment=environment_ref(None))
        side = Side(name, persistence, real, None, Context(offline=True, language="en"), proxy)
        yield side


def run_real(side: Side, thread: str | None = None) -> tuple[float, dict[str, Any]]:
    from graph.runner import run_diagnosis

    thread_id = thread or f"bench-{uuid.uuid4().hex[:12]}"
    start = time.perf_counter()
    values = run_diagnosis(
        side.real,
        thread_id=thread_id,
        context=side.context,
        audit=side.persistence.audit,
        question=QUESTION,
    )
    return (time.perf_counter() - start) * 1000.0, dict(values)


def run_bare(side: Side) -> float:
    config: Any = {"configurable": {"thread_id": f"bare-{uuid.uuid4().hex[:12]}"}}
    start = time.perf_counter()
    side.bare.invoke({"n": 0}, config)
    return (time.perf_counter() - start) * 1000.0


def super_steps(side: Side) -> int:
    """Super-steps of one diagnosis, from its last checkpoint's step number."""
    thread = f"steps-{uuid.uuid4().hex[:8]}"
    run_real(side, thread)
    snapshot = side.real.get_state({"configurable": {"thread_id": thread}})
    return int((snapshot.metadata or {}).get("step", 0))


@dataclass
class Result:
    """Timings and round trips of one database."""

    backend: str
    steps: int = 0
    real_ms: list[float] = field(default_factory=list)
    bare_ms: list[float] = field(default_factory=list)
    trips_real: list[int] = field(default_factory=list)
    trips_bare: list[int] = field(default_factory=list)
    error: str | None = None

    @property
    def ratio(self) -> float:
        return median(self.real_ms) / median(self.bare_ms)


def measure(name: str, runs: int, warmup: int) -> Result:
    from pipeline_overhead import bare_graph

    result = Result(name)
    with opened(name) as side:
        side.steps = result.steps = super_steps(side)
        side.bare = bare_graph(side.steps).compile(checkpointer=side.persistence.checkpointer)
        gc.collect()
        for index in range(warmup + runs):
            order = ("bare", "real") if index % 2 else ("real", "bare")
            for which in order:
                before = side.proxy.trips if side.proxy else 0
                if which == "real":
                    ms, values = run_real(side)
                    if values.get("verdict") not in ("PASS", "LOW_CONFID"):
                        result.error = f"run {index} gave {values.get('verdict')}"
                        return result
                else:
                    ms = run_bare(side)
                trips = (side.proxy.trips if side.proxy else 0) - before
                if index < warmup:
                    continue
                if which == "real":
                    result.real_ms.append(ms)
                    result.trips_real.append(trips)
                else:
                    result.bare_ms.append(ms)
                    result.trips_bare.append(trips)
    return result


def profile(name: str, runs: int, top: int) -> None:
    with opened(name) as side:
        run_real(side)
        profiler = cProfile.Profile()
        for _ in range(runs):
            profiler.enable()
            run_real(side)
            profiler.disable()
    print(f"\ncProfile of {runs} diagnoses on {name}: top {top} functions by cumulative time")
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(top)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="10 runs, 2 warm-up")
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--profile", metavar="BACKEND")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)
    runs, warmup = (10, 2) if args.quick else (max(args.runs, 1), max(args.warmup, 0))
    print(f"Production path, offline diagnosis ({machine()}); {runs} runs, {warmup} warm-up")
    results = []
    for name in [b.strip() for b in args.backends.split(",") if b.strip()]:
        try:
            results.append(measure(name, runs, warmup))
        except Exception as exc:  # report the backend as unavailable, keep the others
            results.append(Result(name, error=f"{type(exc).__name__}: {exc}".splitlines()[0]))
    rows = []
    for r in results:
        if r.error:
            rows.append([r.backend, *(["-"] * 8), r.error])
            continue
        rows.append(
            [
                r.backend,
                str(r.steps),
                fmt(median(r.real_ms)),
                f"{fmt(percentile(r.real_ms, 10))}-{fmt(percentile(r.real_ms, 90))}",
                fmt(median(r.bare_ms)),
                f"{fmt(percentile(r.bare_ms, 10))}-{fmt(percentile(r.bare_ms, 90))}",
                fmt(r.ratio) + "x",
                fmt(median([float(t) for t in r.trips_real]), 0) if r.trips_real[0] else "-",
                fmt(median([float(t) for t in r.trips_bare]), 0) if r.trips_bare[0] else "-",
                "",
            ]
        )
    headers = [
        "database",
        "super-steps",
        "real p50 ms",
        "real p10-p90",
        "bare p50 ms",
        "bare p10-p90",
        "ratio p50",
        "round trips real",
        "round trips bare",
        "note",
    ]
    print(table(headers, rows))
    ok = True
    for r in results:
        if r.error:
            print(f"{r.backend}: not measured ({r.error})")
            ok = False
            continue
        met = r.ratio <= TARGET_RATIO
        ok = ok and met
        print(verdict_line(met, f"{r.backend}: {r.ratio:.2f}x the bare graph <= {TARGET_RATIO}x"))
        if r.backend == "postgres":
            trips = median([float(t) for t in r.trips_real])
            met = trips <= TARGET_TRIPS
            ok = ok and met
            print(
                verdict_line(
                    met, f"postgres: {trips:.0f} round trips per diagnosis <= {TARGET_TRIPS}"
                )
            )
    if args.profile:
        profile(args.profile, 10, args.top)
    print("all targets met" if ok else "some targets missed (see above)")
    return 0  # a benchmark reports; it never fails (see bench/README.md)


if __name__ == "__main__":
    raise SystemExit(main())
