"""Command-line start-up: wall time of whole ``superbiz`` processes, start-up and shutdown included.

Each case is a fresh process, run alternately with the others, repeated; medians and the spread
(p10-p90) are printed.

- ``superbiz --help``, ``superbiz sessions list`` and ``superbiz db upgrade`` on an SQLite file
  (target: at most 300 ms each);
- ``superbiz diagnose --offline`` of the bundled sample incident on an SQLite file, against a
  minimal program that imports ``langgraph.graph`` and runs a bare graph with the same number
  of super-steps on LangGraph's SQLite checkpointer (target: at most 1.2x).

    .venv/bin/python bench/cli_startup.py [--runs N] [--quick]
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, Targets, fmt, machine, median, percentile, run_count, table

QUICK_TARGET_MS = 300.0
DIAGNOSE_TARGET = 1.2
QUESTION = "Is order-service returning HTTP 500 errors, and why?"

BARE = """
import sqlite3, sys, uuid
from typing_extensions import TypedDict
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

class State(TypedDict):
    n: int

def bump(state: State) -> dict:
    return {"n": state["n"] + 1}

steps, path = int(sys.argv[1]), sys.argv[2]
builder = StateGraph(State)
previous = START
for index in range(steps):
    builder.add_node(f"n{index}", bump)
    builder.add_edge(previous, f"n{index}")
    previous = f"n{index}"
builder.add_edge(previous, END)
saver = SqliteSaver(sqlite3.connect(path, check_same_thread=False))
saver.setup()
app = builder.compile(checkpointer=saver)
print(app.invoke({"n": 0}, {"configurable": {"thread_id": uuid.uuid4().hex}})["n"])
"""


def superbiz() -> list[str]:
    script = Path(sys.executable).with_name("superbiz")
    return [str(script)] if script.exists() else [sys.executable, "-m", "apps.cli"]


def timed(argv: list[str], env: dict[str, str]) -> float:
    """Milliseconds of one process, from spawn to exit; it must succeed."""
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=ROOT)
    elapsed = (time.perf_counter() - start) * 1000
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr[-500:]}")
    return elapsed


def super_steps(db_file: Path) -> int:
    """Super-steps of the last diagnosis in the CLI's database (its last checkpoint's step).

    The loop's first checkpoint is step 0 and each super-step adds one, as in
    ``pipeline_overhead.py``.
    """
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(db_file, check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        latest = max(saver.list(None), key=lambda t: t.checkpoint["ts"])
        return int(latest.metadata.get("step", 0))
    finally:
        conn.close()


def main(argv: list[str] | None = None) -> int:
    runs, _ = run_count(__doc__ or "", 9, 3, "3 runs per case", argv)
    work = Path(tempfile.mkdtemp(prefix="superbiz-cli-bench-"))
    try:
        env = {
            **os.environ,
            "SUPERBIZ_OFFLINE": "1",
            "LANGSMITH_TRACING": "false",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        env.pop("OPENAI_API_KEY", None)
        db_file = work / "audit.sqlite"
        db = f"sqlite:///{db_file}"
        cli = superbiz()
        timed([*cli, "db", "upgrade", "--db", db], env)
        diagnose = [*cli, "diagnose", "--offline", "--db", db, QUESTION]
        timed(diagnose, env)  # warm the file system caches and find the super-steps
        steps = super_steps(db_file)
        bare_db = work / "bare.sqlite"
        cases: dict[str, list[str]] = {
            "superbiz --help": [*cli, "--help"],
            "superbiz sessions list": [*cli, "sessions", "list", "--db", db],
            "superbiz db upgrade": [*cli, "db", "upgrade", "--db", db],
            "superbiz diagnose --offline": diagnose,
            f"bare langgraph ({steps} super-steps, SQLite)": [
                sys.executable,
                "-c",
                BARE,
                str(steps),
                str(bare_db),
            ],
        }
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(runs):
            for name, command in cases.items():
                times[name].append(timed(command, env))
        print(f"machine: {machine()}; {runs} runs per case, alternating")
        rows = [
            [name, fmt(median(t), 0), fmt(percentile(t, 10), 0), fmt(percentile(t, 90), 0)]
            for name, t in times.items()
        ]
        print(table(["process", "median ms", "p10 ms", "p90 ms"], rows))
        targets = Targets()
        for name in ("superbiz --help", "superbiz sessions list", "superbiz db upgrade"):
            value = median(times[name])
            targets.check(
                value <= QUICK_TARGET_MS, f"{name}: {value:.0f} ms <= {QUICK_TARGET_MS:.0f} ms"
            )
        bare = median(times[f"bare langgraph ({steps} super-steps, SQLite)"])
        ratio = median(times["superbiz diagnose --offline"]) / bare
        targets.check(
            ratio <= DIAGNOSE_TARGET,
            f"superbiz diagnose --offline: {ratio:.2f}x the bare program <= {DIAGNOSE_TARGET}x",
        )
        return targets.summary()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
