"""Peak memory of one offline diagnosis of the bundled sample incident.

Each configuration runs in a fresh Python process, so ``ru_maxrss`` (the process's peak
resident set) belongs to it alone: imports, graph compilation, then two diagnoses in a row (the
first pays for lazy loading, the second shows the steady state). ``tracemalloc`` records the
Python-heap peak of each diagnosis on its own (its own bookkeeping is not counted).

    .venv/bin/python bench/peak_memory.py [--runs N] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from _common import fmt, machine, median, table

QUESTION = "order-service 为什么报 500 错误？"
CONFIGS = ("none", "sqlite")


def _maxrss_mb() -> float:
    # Linux reports kilobytes.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _rss_mb() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return float("nan")


def child(config: str) -> dict[str, Any]:
    """Measure one configuration in this (fresh) process."""
    os.environ.pop("OPENAI_API_KEY", None)
    started = time.perf_counter()
    from langchain_core.messages import HumanMessage

    from graph.compile import RunStores, compile_graph
    from state.context import Context

    out: dict[str, Any] = {"config": config, "rss_imports_mb": _rss_mb()}
    tracemalloc.start()
    conn = None
    folder = None
    saver = None
    if config == "sqlite":
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver

        folder = tempfile.TemporaryDirectory(prefix="bench-mem-")
        conn = sqlite3.connect(os.path.join(folder.name, "checkpoints.db"), check_same_thread=False)
        saver = SqliteSaver(conn)
    app = compile_graph(RunStores(saver))
    out["compile_peak_kb"] = tracemalloc.get_traced_memory()[1] / 1024
    out["rss_compiled_mb"] = _rss_mb()
    ctx = Context(offline=True, language="zh")
    for label in ("cold", "warm"):
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        config_dict = {"configurable": {"thread_id": f"mem-{label}"}}
        start = time.perf_counter()
        values = app.invoke({"messages": [HumanMessage(QUESTION)]}, config_dict, context=ctx)
        out[f"{label}_ms"] = (time.perf_counter() - start) * 1000.0
        current, peak = tracemalloc.get_traced_memory()
        out[f"{label}_peak_kb"] = (peak - before) / 1024
        out[f"{label}_retained_kb"] = (current - before) / 1024
        out[f"{label}_verdict"] = values.get("verdict")
    tracemalloc.stop()
    out["rss_after_mb"] = _rss_mb()
    out["maxrss_mb"] = _maxrss_mb()
    out["total_s"] = time.perf_counter() - started
    if conn is not None:
        conn.close()
    if folder is not None:
        folder.cleanup()
    return out


def run_child(config: str) -> dict[str, Any]:
    """Run :func:`child` in a fresh interpreter and read its JSON line."""
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", config],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"config": config, "error": f"exit {proc.returncode}: {tail}"}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    """Measure each configuration and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="fresh processes per configuration")
    parser.add_argument("--quick", action="store_true", help="one process per configuration")
    parser.add_argument("--child", choices=CONFIGS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child)))
        return 0
    runs = 1 if args.quick else max(args.runs, 1)

    print(f"Peak memory of one offline diagnosis ({machine()}); {runs} process(es) per config")
    print(f"Question: {QUESTION} (bundled sample incident, offline rule-based models)\n")
    rows = []
    for config in CONFIGS:
        results = [run_child(config) for _ in range(runs)]
        good = [r for r in results if "error" not in r]
        if not good:
            rows.append([config, results[0]["error"]])
            continue

        def m(key: str, good: list[dict[str, Any]] = good, digits: int = 1) -> str:
            return fmt(median([float(r[key]) for r in good]), digits)

        rows.append(
            [
                "no checkpointer" if config == "none" else "SQLite",
                f"{good[0]['cold_verdict']}/{good[0]['warm_verdict']}",
                m("cold_peak_kb", digits=0),
                m("warm_peak_kb", digits=0),
                m("warm_retained_kb", digits=0),
                m("compile_peak_kb", digits=0),
                m("rss_imports_mb"),
                m("rss_compiled_mb"),
                m("maxrss_mb"),
                m("cold_ms"),
                m("warm_ms"),
            ]
        )
    print(
        table(
            [
                "checkpointer",
                "verdicts",
                "cold peak KB",
                "warm peak KB",
                "warm kept KB",
                "compile KB",
                "RSS imports",
                "RSS compiled",
                "ru_maxrss MB",
                "cold ms",
                "warm ms",
            ],
            rows,
        )
    )
    print(
        "\n(peak: tracemalloc peak of the Python heap during one diagnosis, above what was held "
        "before it;\n kept: still held after it; RSS: resident set in MB after imports / after "
        "compiling;\n ru_maxrss: the process's peak resident set; cold/warm ms are with "
        "tracemalloc on, so slower than normal)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
