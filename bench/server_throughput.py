"""Server throughput: ``superbiz serve --workers 2`` on PostgreSQL against a minimal endpoint.

Both servers run as separate processes with two uvicorn workers on one throw-away PostgreSQL
database, reached through a loopback proxy that counts round trips. The load is offline
diagnoses, a new thread per request, 16 requests in flight:

- **superbiz**: ``POST /api/chat`` ``{"question": ...}`` (no API keys, loopback, no rate limit:
  the whole load is one caller);
- **bare**: a minimal Starlette endpoint that runs a bare LangGraph graph of the same number of
  super-steps (14) on LangGraph's PostgresSaver over a psycopg pool with superbiz's settings
  (connection options and health check).

Printed: requests per second, latency p50/p95/p99, round trips per request, and the ratio of
the bare endpoint's throughput to superbiz's (target: at most 1.5x).

    .venv/bin/python bench/server_throughput.py [--requests N] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from _common import ROOT, fmt, machine, median, percentile, table, throwaway_postgres, verdict_line
from production_path import CountingProxy
from psycopg.conninfo import conninfo_to_dict

TARGET_RATIO = 1.5
CONCURRENCY = 16
STEPS = 14
QUESTION = "Is order-service returning HTTP 500 errors, and why?"

BARE_APP = """
import os, uuid
from typing_extensions import TypedDict
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, StateGraph
from psycopg_pool import ConnectionPool
from persistence.pools import POOL_KWARGS, check_connection, note_returned
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse
from starlette.routing import Route

class State(TypedDict):
    n: int

def bump(state):
    return {"n": state["n"] + 1}

builder = StateGraph(State)
previous = START
for index in range(int(os.environ["BARE_STEPS"])):
    builder.add_node(f"n{index}", bump)
    builder.add_edge(previous, f"n{index}")
    previous = f"n{index}"
builder.add_edge(previous, END)
pool = ConnectionPool(
    os.environ["BARE_CONNINFO"],
    kwargs=POOL_KWARGS,
    min_size=1,
    max_size=10,
    check=check_connection,
    reset=note_returned,
    open=True,
)
graph = builder.compile(checkpointer=PostgresSaver(pool))

def run():
    config = {"configurable": {"thread_id": uuid.uuid4().hex}}
    return graph.invoke({"n": 0}, config)["n"]

async def chat(request):
    await request.body()
    return JSONResponse({"n": await run_in_threadpool(run)})

app = Starlette(routes=[Route("/chat", chat, methods=["POST"])])
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_ready(url: str, process: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        try:
            if httpx.get(url, timeout=1.0).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the server did not answer {url} within {timeout:.0f} s")


@dataclass
class Load:
    """What one load run measured."""

    name: str
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    trips: int = 0

    @property
    def rps(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds else 0.0


async def drive(url: str, body: dict[str, Any], requests: int, load: Load) -> None:
    queue: asyncio.Queue[int] = asyncio.Queue()
    for index in range(requests):
        queue.put_nowait(index)

    async def worker(client: httpx.AsyncClient) -> None:
        while True:
            try:
                queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            start = time.perf_counter()
            response = await client.post(url, json=body)
            elapsed = (time.perf_counter() - start) * 1000.0
            if response.status_code == 200:
                load.latencies.append(elapsed)
            else:
                load.errors += 1
                load.statuses[response.status_code] = load.statuses.get(response.status_code, 0) + 1

    limits = httpx.Limits(max_connections=CONCURRENCY)
    async with httpx.AsyncClient(timeout=120.0, limits=limits) as client:
        start = time.perf_counter()
        await asyncio.gather(*(worker(client) for _ in range(CONCURRENCY)))
        load.seconds = time.perf_counter() - start


def measure(
    name: str,
    command: list[str],
    env: dict[str, str],
    ready: str,
    url: str,
    body: Any,
    n: int,
    proxy: CountingProxy,
) -> Load:
    load = Load(name)
    process = subprocess.Popen(
        command, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_ready(ready, process)
        warm = Load(name)
        asyncio.run(drive(url, body, CONCURRENCY, warm))  # warm both workers
        before = proxy.trips
        asyncio.run(drive(url, body, n, load))
        load.trips = proxy.trips - before
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
    return load


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--requests", type=int, default=160, help="requests per server")
    parser.add_argument("--quick", action="store_true", help="48 requests per server")
    args = parser.parse_args(argv)
    n = 48 if args.quick else max(args.requests, CONCURRENCY)
    print(f"Server throughput ({machine()}); {n} requests per server, {CONCURRENCY} in flight")
    with throwaway_postgres() as conninfo, tempfile.TemporaryDirectory() as folder:
        params = conninfo_to_dict(conninfo)
        proxy = CountingProxy(str(params.get("host", "127.0.0.1")), int(params.get("port", 5432)))
        try:
            user, dbname = params.get("user", "postgres"), params["dbname"]
            url = f"postgresql://{user}@127.0.0.1:{proxy.port}/{dbname}"
            env = {
                **os.environ,
                "SUPERBIZ_OFFLINE": "1",
                "LANGSMITH_TRACING": "false",
                "SUPERBIZ_API_RATE_PER_MIN": "0",  # no rate limit: the load is one caller
            }
            env.pop("OPENAI_API_KEY", None)
            env.pop("SUPERBIZ_API_KEYS", None)
            env.pop("SUPERBIZ_API_KEYS_FILE", None)
            port = free_port()
            script = Path(sys.executable).with_name("superbiz")
            cli = [str(script)] if script.exists() else [sys.executable, "-m", "apps.cli"]
            real = measure(
                "superbiz serve --workers 2",
                [*cli, "serve", "--workers", "2", "--port", str(port), "--db", url],
                env,
                f"http://127.0.0.1:{port}/api/healthz",
                f"http://127.0.0.1:{port}/api/chat",
                {"question": QUESTION},
                n,
                proxy,
            )
            from langgraph.checkpoint.postgres import PostgresSaver

            with PostgresSaver.from_conn_string(
                f"host=127.0.0.1 port={proxy.port} user={user} dbname={dbname}"
            ) as saver:
                saver.setup()
            Path(folder, "bare_server.py").write_text(BARE_APP, encoding="utf-8")
            port = free_port()
            bare_env = {
                **env,
                "BARE_STEPS": str(STEPS),
                "BARE_CONNINFO": f"host=127.0.0.1 port={proxy.port} user={user} dbname={dbname}",
            }
            bare = measure(
                "bare Starlette endpoint",
                [
                    sys.executable,
                    "-m",
                    "uvicorn",
                    "bare_server:app",
                    "--app-dir",
                    folder,
                    "--workers",
                    "2",
                    "--port",
                    str(port),
                    "--log-level",
                    "warning",
                ],
                bare_env,
                f"http://127.0.0.1:{port}/",
                f"http://127.0.0.1:{port}/chat",
                {"question": QUESTION},
                n,
                proxy,
            )
        finally:
            proxy.close()
    rows = [
        [
            load.name,
            fmt(load.rps, 1),
            fmt(median(load.latencies), 0),
            fmt(percentile(load.latencies, 95), 0),
            fmt(percentile(load.latencies, 99), 0),
            fmt(load.trips / max(len(load.latencies) + load.errors, 1), 0),
            str(load.errors) + (f" {load.statuses}" if load.statuses else ""),
        ]
        for load in (real, bare)
    ]
    print(
        table(["server", "req/s", "p50 ms", "p95 ms", "p99 ms", "round trips/req", "errors"], rows)
    )
    ratio = bare.rps / real.rps if real.rps else float("inf")
    met = ratio <= TARGET_RATIO and real.errors == 0
    print(
        verdict_line(
            met,
            f"throughput: bare {bare.rps:.1f} req/s / superbiz {real.rps:.1f} req/s = {ratio:.2f}x "
            f"<= {TARGET_RATIO}x" + (f" ({real.errors} errors)" if real.errors else ""),
        )
    )
    return 0  # a benchmark reports; it never fails (see bench/README.md)


if __name__ == "__main__":
    raise SystemExit(main())
