"""Pipeline overhead per diagnosis, against a bare LangGraph graph with as many super-steps.

The real graph runs one fixed diagnosis of the bundled sample incident with zero-latency scripted
models: a planner reply, three executor turns each making one tool call (query_logs,
query_metrics, lookup_knowledge), a final executor_evidence_v2 answer whose claims cite those
invocations, and a Verifier PASS reply. Beside it, in the same process and on the same
checkpointer, a bare graph of trivial nodes with the same number of super-steps runs
alternately. Graphs are compiled once per checkpointer; a fresh scripted model set is injected
before every diagnosis (outside the timed part).

    .venv/bin/python bench/pipeline_overhead.py [--runs N] [--quick] [--backends LIST]
        [--profile BACKEND]
"""

from __future__ import annotations

import contextlib
import cProfile
import dataclasses
import gc
import json
import os
import pstats
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from _common import (
    bench_parser,
    fmt,
    fmt_bytes,
    machine,
    median,
    percentile,
    table,
    throwaway_postgres,
    verdict_line,
)
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from graph.builder import build_graph
from graph.compile import RunStores, guarded
from models.budget import GetModel
from models.scripted import scripted_models
from persistence.audit import InMemoryAuditStore
from persistence.ledger import InMemoryLedger
from state.context import Context

TARGET_RATIO = 1.5

QUESTION = "Is order-service returning HTTP 500 errors, and why?"

TOOL_CALLS: list[dict[str, Any]] = [
    {"name": "query_logs", "args": {"service": "order-service", "level": "ERROR"}},
    {"name": "query_metrics", "args": {"service": "order-service"}},
    {"name": "lookup_knowledge", "args": {"query": "connection pool exhaustion"}},
]


def _claim(claim_id: str, claim_type: str, text: str, ref: tuple[str, ...]) -> dict[str, Any]:
    """One claim bound to ``(invocation id, tool, source type, raw_path, excerpt)``."""
    inv, tool, source_type, raw_path, excerpt = ref
    binding = {
        "source_type": source_type,
        "tool_name": tool,
        "source_invocation_id": inv,
        "raw_path": raw_path,
        "evidence_excerpt": excerpt,
    }
    return {
        "claim_id": claim_id,
        "claim_type": claim_type,
        "claim_text": text,
        "support_level": "direct",
        "evidence_bindings": [binding],
    }


EXECUTOR_ANSWER: dict[str, Any] = {
    "answer_version": "executor_evidence_v2",
    "claims": [
        _claim(
            "c1",
            "observation",
            "order-service logs HikariPool-1 connection timeouts after 30000ms.",
            (
                "inv-1",
                "query_logs",
                "log",
                "logs[0]",
                "HikariPool-1 - Connection is not available, request timed out after 30000ms",
            ),
        ),
        _claim(
            "c2",
            "observation",
            "OrderServiceHigh5xxRate is firing at 0.23 against a threshold of 0.05.",
            (
                "inv-2",
                "query_metrics",
                "alert",
                "alerts[0]",
                "OrderServiceHigh5xxRate service=order-service severity=critical "
                "state=firing value=0.23 threshold=0.05",
            ),
        ),
        _claim(
            "c3",
            "state",
            "HikariPool-1 of order-service has 20 of 20 connections in use.",
            (
                "inv-2",
                "query_metrics",
                "alert",
                "alerts[1]",
                "order-service HikariPool-1 has 20 of 20 connections in use",
            ),
        ),
    ],
    "hypotheses": [
        {
            "text": "Connection pool exhaustion causes the 5xx responses.",
            "basis": "timeouts and the saturated pool coincide with the 5xx alert",
        }
    ],
    "recommended_actions": [
        {
            "text": "Follow the connection pool exhaustion runbook (inv-3 documents[0]).",
            "source": "runbook",
        }
    ],
    "missing_info": [],
}


def _check(claim_id: str, trace_ref: str, tool: str, inv: str) -> dict[str, Any]:
    return {
        "claim_id": claim_id,
        "verification": "direct_observation",
        "detail": "stated in the verified excerpt",
        "evidence_refs": [
            {"trace_ref": trace_ref, "tool_name": tool, "source_invocation_ids": [inv]}
        ],
    }


VERIFIER_REPLY: dict[str, Any] = {
    "rationale": "every claim is stated in its verified excerpt",
    "claim_checks": [
        _check("c1", "t1", "query_logs", "inv-1"),
        _check("c2", "t2", "query_metrics", "inv-2"),
        _check("c3", "t2", "query_metrics", "inv-2"),
    ],
    "critical_fact_count": 3,
    "groundedness_score": 1.0,
    "verdict": "PASS",
}


def script() -> dict[str, list[Any]]:
    """The per-role replies of one diagnosis."""
    return {
        "planner": [
            "1. ERROR logs of order-service. 2. Its alerts and series. 3. The pool runbook."
        ],
        "executor": [
            *({"tool_calls": [call]} for call in TOOL_CALLS),
            {"content": json.dumps(EXECUTOR_ANSWER)},
        ],
        "verifier": [VERIFIER_REPLY],
    }


class ModelHolder:
    """``get_model`` that forwards to the scripted model set of the current diagnosis."""

    def __init__(self) -> None:
        self.current: GetModel | None = None

    def __call__(self, role: str, ctx: Context) -> BaseChatModel:
        assert self.current is not None, "no scripted models injected"
        return self.current(role, ctx)


class BareState(TypedDict):
    """State of the bare graph: one counter."""

    n: int


def _bump(state: BareState) -> dict[str, int]:
    return {"n": state["n"] + 1}


def bare_graph(steps: int) -> StateGraph[BareState, None, BareState, BareState]:
    """A linear chain of ``steps`` trivial nodes (one super-step each)."""
    builder: StateGraph[BareState, None, BareState, BareState] = StateGraph(BareState)
    names = [f"step{i}" for i in range(steps)]
    for name in names:
        builder.add_node(name, _bump)
    builder.add_edge(START, names[0])
    for left, right in zip(names, names[1:], strict=False):
        builder.add_edge(left, right)
    builder.add_edge(names[-1], END)
    return builder


# --------------------------------------------------------------------------- checkpointers


@dataclass
class Store:
    """A checkpointer plus a probe telling how many bytes one thread left in it."""

    saver: Any
    thread_bytes: Callable[[str], int | None]


@contextlib.contextmanager
def checkpointer(name: str) -> Iterator[Store]:
    """Yield the :class:`Store` of a backend (``none``, ``sqlite``, ``postgres``)."""
    if name == "none":
        yield Store(None, lambda thread: None)
        return
    if name == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        with tempfile.TemporaryDirectory(prefix="bench-sqlite-") as folder:
            conn = sqlite3.connect(os.path.join(folder, "checkpoints.db"), check_same_thread=False)

            def sqlite_bytes(thread: str) -> int | None:
                query = (
                    "SELECT (SELECT COALESCE(SUM(LENGTH(checkpoint) + LENGTH(metadata)), 0) "
                    "FROM checkpoints WHERE thread_id = ?) + (SELECT COALESCE(SUM(LENGTH(value)),"
                    " 0) FROM writes WHERE thread_id = ?)"
                )
                return int(conn.execute(query, (thread, thread)).fetchone()[0])

            try:
                yield Store(SqliteSaver(conn), sqlite_bytes)
            finally:
                conn.close()
        return
    if name == "postgres":
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg import Connection
        from psycopg.rows import dict_row

        with throwaway_postgres() as conninfo:
            with Connection.connect(
                conninfo, autocommit=True, prepare_threshold=0, row_factory=dict_row
            ) as conn:
                saver = PostgresSaver(conn)  # type: ignore[arg-type]
                saver.setup()

                def postgres_bytes(thread: str) -> int | None:
                    row = conn.execute(
                        "SELECT (SELECT COALESCE(SUM(pg_column_size(checkpoint) + "
                        "pg_column_size(metadata)), 0) FROM checkpoints WHERE thread_id = %(t)s)"
                        " + (SELECT COALESCE(SUM(octet_length(blob)), 0) FROM checkpoint_blobs"
                        " WHERE thread_id = %(t)s) + (SELECT COALESCE(SUM(octet_length(blob)), 0)"
                        " FROM checkpoint_writes WHERE thread_id = %(t)s) AS b",
                        {"t": thread},
                    ).fetchone()
                    return int(row["b"]) if row else None

                yield Store(saver, postgres_bytes)
        return
    raise ValueError(f"unknown backend {name!r}")


# --------------------------------------------------------------------------- measuring


@dataclass
class Result:
    """Timings of one backend."""

    backend: str
    steps: int
    real_ms: list[float] = field(default_factory=list)
    bare_ms: list[float] = field(default_factory=list)
    real_bytes: int | None = None
    bare_bytes: int | None = None
    error: str | None = None

    @property
    def ratio(self) -> float:
        """Median real / median bare."""
        return median(self.real_ms) / median(self.bare_ms)


def _config(thread: str | None = None) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread or f"bench-{uuid.uuid4().hex[:12]}"}}


def make_real(saver: Any, wrap: Callable[[str, Any], Any] | None = None) -> tuple[Any, ModelHolder]:
    """The compiled diagnosis graph plus the holder its models are injected through."""
    holder = ModelHolder()
    stores = RunStores(saver, audit=InMemoryAuditStore(), ledger=InMemoryLedger())
    builder = build_graph(
        get_model=holder, ledger=stores.ledger, audit=stores.audit, locks=stores.locks
    )
    if wrap is not None:
        # Swap each node's function for a timed one (same signature, same coercion as add_node).
        from langgraph._internal._runnable import coerce_to_runnable

        for name, spec in list(builder.nodes.items()):
            timed = wrap(name, getattr(spec.runnable, "func", spec.runnable))
            builder.nodes[name] = dataclasses.replace(
                spec, runnable=coerce_to_runnable(timed, name=name, trace=False)
            )
    # compiled as graph.compile.compile_graph does, with the nodes swapped in first
    return guarded(builder.compile(checkpointer=saver), stores), holder


def run_real(
    app: Any, holder: ModelHolder, ctx: Context, thread: str | None = None
) -> tuple[float, dict[str, Any]]:
    """One timed diagnosis; returns (ms, final values)."""
    holder.current = scripted_models(script())
    config = _config(thread)
    message = HumanMessage(QUESTION)
    start = time.perf_counter()
    values = app.invoke({"messages": [message]}, config, context=ctx)
    elapsed = (time.perf_counter() - start) * 1000.0
    return elapsed, values


def run_bare(app: Any, thread: str | None = None) -> float:
    """One timed bare run."""
    config = _config(thread)
    start = time.perf_counter()
    app.invoke({"n": 0}, config)
    return (time.perf_counter() - start) * 1000.0


def count_super_steps(ctx: Context) -> tuple[int, list[str], str]:
    """Super-steps of one diagnosis, its route and its verdict.

    Read from the step number of the last checkpoint (the loop's first checkpoint is step 0,
    each super-step adds one), not from the stream of updates: the internal nodes are hidden
    from streams, so they would not be counted there.
    """
    from langgraph.checkpoint.memory import InMemorySaver

    app, holder = make_real(InMemorySaver())
    holder.current = scripted_models(script())
    config = _config()
    app.invoke({"messages": [HumanMessage(QUESTION)]}, config, context=ctx)
    snapshot = app.get_state(config)
    steps = int((snapshot.metadata or {}).get("step", 0))
    values = snapshot.values
    return steps, list(values.get("route") or []), str(values.get("verdict"))


def measure(backend: str, steps: int, runs: int, warmup: int, ctx: Context) -> Result:
    """Real and bare graphs side by side on one backend."""
    with checkpointer(backend) as store:
        real, holder = make_real(store.saver)
        bare = bare_graph(steps).compile(checkpointer=store.saver)
        result = Result(backend, steps)
        # One full collection before timing, then leave the collector to its normal schedule.
        gc.collect()
        for index in range(warmup + runs):
            # Alternate the order so drift (caches, GC, the database) hits both alike.
            if index % 2:
                bare_ms = run_bare(bare)
                real_ms, values = run_real(real, holder, ctx)
            else:
                real_ms, values = run_real(real, holder, ctx)
                bare_ms = run_bare(bare)
            if values.get("verdict") != "PASS":
                result.error = f"run {index} gave {values.get('verdict')}, not PASS"
                return result
            if index >= warmup:
                result.real_ms.append(real_ms)
                result.bare_ms.append(bare_ms)
        run_real(real, holder, ctx, thread="bench-size-real")
        run_bare(bare, thread="bench-size-bare")
        result.real_bytes = store.thread_bytes("bench-size-real")
        result.bare_bytes = store.thread_bytes("bench-size-bare")
        return result


# --------------------------------------------------------------------------- where the time goes


def breakdown(backend: str, steps: int, runs: int, ctx: Context) -> None:
    """Time inside each node body (plain timers, no profiler) vs. outside them, with the bare
    graph run alternately in the same pass (means, so the parts add up)."""
    spent: dict[str, list[float]] = {}

    def wrap(name: str, node: Any) -> Any:
        def timed(state: Any, *, runtime: Any) -> Any:
            start = time.perf_counter()
            try:
                return node(state, runtime=runtime)
            finally:
                spent.setdefault(name, []).append((time.perf_counter() - start) * 1000.0)

        return timed

    totals: list[float] = []
    bares: list[float] = []
    warmup = 3
    with checkpointer(backend) as store:
        app, holder = make_real(store.saver, wrap=wrap)
        bare = bare_graph(steps).compile(checkpointer=store.saver)
        for index in range(runs + warmup):
            if index == warmup:
                spent.clear()
            elapsed, _ = run_real(app, holder, ctx)
            bare_ms = run_bare(bare)
            if index >= warmup:
                totals.append(elapsed)
                bares.append(bare_ms)
    total = sum(totals) / runs
    bare_mean = sum(bares) / runs
    rows = []
    inside = 0.0
    for name, values in sorted(spent.items(), key=lambda kv: -sum(kv[1])):
        per_diagnosis = sum(values) / runs
        inside += per_diagnosis
        rows.append(
            [name, str(len(values) // runs), fmt(per_diagnosis), _share(per_diagnosis, total)]
        )
    outside = total - inside
    rows += [
        ["(all node bodies)", "", fmt(inside), _share(inside, total)],
        ["(outside the nodes: LangGraph + checkpointer)", "", fmt(outside), _share(outside, total)],
        ["  the bare graph's whole run", "", fmt(bare_mean), _share(bare_mean, total)],
        [
            "  the rest (bigger state to merge and store)",
            "",
            fmt(outside - bare_mean),
            _share(outside - bare_mean, total),
        ],
        ["(mean diagnosis)", "", fmt(total), "100.0%"],
    ]
    print(f"\nWhere a diagnosis spends its time on {backend} (means of {runs} runs, plain timers):")
    print(table(["where", "calls", "ms/diagnosis", "share"], rows))


def _share(part: float, total: float) -> str:
    return fmt(100.0 * part / total, 1) + "%" if total else "-"


def profile(backend: str, runs: int, ctx: Context, top: int) -> None:
    """cProfile ``runs`` diagnoses and list the functions with the most own time."""
    with checkpointer(backend) as store:
        app, holder = make_real(store.saver)
        run_real(app, holder, ctx)
        profiler = cProfile.Profile()
        for _ in range(runs):
            holder.current = scripted_models(script())
            config = _config()
            profiler.enable()
            app.invoke({"messages": [HumanMessage(QUESTION)]}, config, context=ctx)
            profiler.disable()
    stats = pstats.Stats(profiler)
    print(f"\ncProfile of {runs} diagnoses on {backend}: top {top} functions by own time")
    stats.sort_stats("tottime").print_stats(top)
    print("Callers of copy.deepcopy (cumulative seconds over all profiled runs):")
    stats.print_callers(r"copy.py:\d+\(deepcopy\)$")


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its tables."""
    parser = bench_parser(
        __doc__, 100, "20 runs, 3 warm-up, no profile", runs_help="timed diagnoses per backend"
    )
    parser.add_argument("--warmup", type=int, default=10, help="untimed diagnoses first")
    parser.add_argument(
        "--backends",
        default="none,sqlite,postgres",
        help="comma-separated among none, sqlite, postgres",
    )
    parser.add_argument(
        "--profile",
        metavar="BACKEND",
        help="also run cProfile on this backend and list the top functions",
    )
    parser.add_argument("--profile-runs", type=int, default=20)
    parser.add_argument("--top", type=int, default=25, help="functions listed by the profile")
    args = parser.parse_args(argv)
    runs, warmup = (20, 3) if args.quick else (max(args.runs, 1), max(args.warmup, 0))
    backends = [name.strip() for name in args.backends.split(",") if name.strip()]

    ctx = Context(offline=False, language="en", composer_mode="template")
    print(f"Pipeline overhead per diagnosis ({machine()}); {runs} timed runs, {warmup} warm-up")
    print("Real: the diagnosis graph with zero-latency scripted models on the sample incident")
    print("      (planner, 3 executor turns with one tool call each, final answer, verifier PASS).")
    print("Bare: a linear graph of trivial nodes with the same number of super-steps,")
    print("      run alternately with the real one on the same checkpointer.")
    steps, route, verdict = count_super_steps(ctx)
    print(f"Super-steps: {steps}; route: {' > '.join(route)}; verdict {verdict}\n")
    if verdict != "PASS" or len(route) != steps:
        print(f"The scripted diagnosis did not run as intended (verdict {verdict}); no figures.")
        return 0

    results: list[Result] = []
    for backend in backends:
        started = time.perf_counter()
        try:
            result = measure(backend, steps, runs, warmup, ctx)
        except Exception as exc:  # report the backend as unavailable, keep the others
            result = Result(backend, steps, error=f"{type(exc).__name__}: {exc}".splitlines()[0])
        status = result.error or f"done in {time.perf_counter() - started:.1f} s"
        print(f"  {backend}: {status}")
        results.append(result)

    rows = []
    missed: list[Result] = []
    for r in results:
        if r.error:
            rows.append([r.backend, *(["-"] * 9), r.error])
            continue
        ok = r.ratio <= TARGET_RATIO
        if not ok:
            missed.append(r)
        rows.append(
            [
                r.backend,
                fmt(median(r.real_ms)),
                fmt(percentile(r.real_ms, 90)),
                fmt(median(r.bare_ms)),
                fmt(percentile(r.bare_ms, 90)),
                fmt(median(r.real_ms) - median(r.bare_ms)),
                fmt(r.ratio) + "x",
                fmt(percentile(r.real_ms, 90) / percentile(r.bare_ms, 90)) + "x",
                fmt_bytes(r.real_bytes) if r.real_bytes is not None else "-",
                fmt_bytes(r.bare_bytes) if r.bare_bytes is not None else "-",
                "met" if ok else "MISSED",
            ]
        )
    print()
    print(
        table(
            [
                "checkpointer",
                "real p50 ms",
                "real p90 ms",
                "bare p50 ms",
                "bare p90 ms",
                "p50 diff ms",
                "ratio p50",
                "ratio p90",
                "stored/diag",
                "stored/bare",
                f"p50 <= {TARGET_RATIO}x",
            ],
            rows,
        )
    )
    print("(stored: checkpoint bytes one diagnosis / one bare run leaves in the checkpointer)\n")
    for r in results:
        if r.error:
            print(f"{r.backend}: not measured ({r.error})")
            continue
        diff = median(r.real_ms) - median(r.bare_ms)
        print(
            verdict_line(
                r.ratio <= TARGET_RATIO,
                f"{r.backend}: real/bare = {r.ratio:.2f}x at p50 (target <= {TARGET_RATIO}x); "
                f"{diff:.2f} ms more per diagnosis, {diff / max(r.steps, 1):.2f} ms per super-step",
            )
        )

    if not args.quick:
        for r in missed:
            try:
                breakdown(r.backend, steps, 30, ctx)
            except Exception as exc:  # a diagnostic; never fail the benchmark on it
                print(f"breakdown of {r.backend} failed: {type(exc).__name__}: {exc}")
    if args.profile:
        try:
            profile(args.profile, args.profile_runs, ctx, args.top)
        except Exception as exc:  # a diagnostic; never fail the benchmark on it
            print(f"profile of {args.profile} failed: {type(exc).__name__}: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
