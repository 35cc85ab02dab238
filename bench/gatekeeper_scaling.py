"""Gatekeeper + trace summary time as a diagnosis grows (invocations x claims).

Invocations are real: query_logs / query_metrics / lookup_knowledge calls run through the real
ToolRunner over a SampleBackend serving a generated environment, so outputs, caps and evidence
refs are exactly what a diagnosis records. Claims bind real refs with real excerpts and state
specifics found in them, so every rule does its full work (the Gatekeeper passes).

Timed per case: ``run_gatekeeper`` as the gatekeeper node calls it (bundled catalog, read per
call) and ``build_trace_summary``; ``evaluate_rules`` (also run by the gatekeeper node) is shown
beside them.

    .venv/bin/python bench/gatekeeper_scaling.py [--runs N] [--quick]
"""

from __future__ import annotations

import builtins
import cProfile
import gc
import math
import pstats
import random
import sys
import time
from collections.abc import Callable
from typing import Any

from _common import fmt, machine, median, percentile, run_count, table, verdict_line

from evidence.sample import SampleBackend
from persistence.ledger import InMemoryLedger
from tools.runner import ToolRunner
from verification.catalog import load_catalog
from verification.executor_output import read_answer
from verification.gatekeeper import run_gatekeeper
from verification.rule_evaluation import evaluate_rules
from verification.trace_summary import build_trace_summary

INVOCATIONS = (10, 100, 1000)
CLAIMS = (10, 100, 500)
TARGET_MS = 50.0
TARGET_CASE = (1000, 500)

SERVICES = [f"svc-{index:02d}" for index in range(20)]
TOPICS = 400
METRICS = 50


class ListLedger:
    """A ledger that keeps rows without copying them (builds big inputs fast; not timed)."""

    def __init__(self) -> None:
        self._rows: dict[str, dict[str, Any]] = {}
        self._by_diagnosis: dict[str, builtins.list[str]] = {}

    def record(self, invocation: dict[str, Any]) -> dict[str, Any]:
        key = invocation["idempotency_key"]
        if key in self._rows:
            return self._rows[key]
        keys = self._by_diagnosis.setdefault(invocation["diagnosis_id"], [])
        row = dict(invocation, invocation_id=f"inv-{len(keys) + 1}")
        self._rows[key] = row
        keys.append(key)
        return row

    def find(self, idempotency_key: str) -> dict[str, Any] | None:
        return self._rows.get(idempotency_key)

    def list(self, diagnosis_id: str) -> builtins.list[dict[str, Any]]:
        return [self._rows[key] for key in self._by_diagnosis.get(diagnosis_id, [])]


def environment(rng: random.Random) -> dict[str, Any]:
    """A generated incident: logs in topic batches, alerts and series per service, runbooks."""
    logs = []
    for topic in range(TOPICS):
        for line in range(8):
            service = SERVICES[(topic + line) % len(SERVICES)]
            ms = rng.randint(100, 60000)
            status = rng.choice([500, 502, 503, 504])
            logs.append(
                {
                    "timestamp": f"2026-03-01T10:{line:02d}:{topic % 60:02d}Z",
                    "level": "ERROR" if line % 3 else "WARN",
                    "service": service,
                    "instance": f"{service}-{rng.randrange(16**5):05x}",
                    "message": (
                        f"topic{topic}: POST /api/v1/orders/{rng.randint(1, 99999)} failed "
                        f"after {ms}ms with HTTP {status}: upstream db-{topic % 7} "
                        f"TimeoutException while acquiring a connection from pool-{topic % 5} "
                        f"(active=20 idle=0 waiting={rng.randint(1, 80)})"
                    ),
                }
            )
    alerts = [
        {
            "alert_name": f"Alert{index}{'HighLatency' if index % 2 else 'ErrorRate'}",
            "service": SERVICES[index % len(SERVICES)],
            "severity": "critical" if index % 3 else "warning",
            "state": "firing",
            "value": round(rng.random(), 3),
            "threshold": 0.05,
            "summary": f"{SERVICES[index % len(SERVICES)]} alert {index} above threshold for 5m",
            "active_at": f"2026-03-01T10:{index % 60:02d}:00Z",
        }
        for index in range(100)
    ]
    series = [
        {
            "metric": f"m{metric}_total",
            "labels": {"service": service, "env": "prod"},
            "points_count": 36,
            "min": round(rng.random(), 3),
            "max": round(1 + rng.random(), 3),
            "last": round(rng.random(), 3),
            "unit": "s",
        }
        for service in SERVICES
        for metric in range(METRICS)
    ]
    documents = [
        {
            "doc_id": f"rb-{index}",
            "title": f"Runbook {index}: topic{index} pool exhaustion",
            "source": f"runbook/rb-{index}.md",
            "chunk": (
                f"topic{index} symptoms: HTTP 503 after 30000ms while the pool has 20 of 20 "
                "connections in use. Check slow queries, raise maximumPoolSize only after "
                "confirming the database has headroom, restart pods one at a time. " * 3
            ),
        }
        for index in range(TOPICS)
    ]
    return {"logs": logs, "alerts": alerts, "series": series, "documents": documents}


def tool_call(index: int) -> dict[str, Any]:
    """The ``index``-th call of a big diagnosis: distinct arguments, so nothing merges."""
    kind = index % 3
    topic = index // 3
    if kind == 0:
        args: dict[str, Any] = {"query": f"topic{topic % TOPICS}:", "limit": 20}
        return {"name": "query_logs", "args": args, "id": f"call-{index}"}
    if kind == 1:
        service = SERVICES[topic % len(SERVICES)]
        metric = topic // len(SERVICES) % METRICS
        return {
            "name": "query_metrics",
            "args": {"service": service, "promql": f"rate(m{metric}_total[5m])"},
            "id": f"call-{index}",
        }
    return {
        "name": "lookup_knowledge",
        "args": {"query": f"topic{topic % TOPICS} pool", "top_k": 3},
        "id": f"call-{index}",
    }


def invocations(count: int, backend: SampleBackend) -> list[dict[str, Any]]:
    """``count`` invocations recorded by the real ToolRunner."""
    runner = ToolRunner(backend, ListLedger())
    rows = [
        runner.run(tool_call(index), diagnosis_id="diag-bench", thread_id="bench", round=1)
        for index in range(count)
    ]
    return rows


def _excerpt_and_text(ref: dict[str, Any], tool: str) -> tuple[str, str]:
    """An exact excerpt of a ref and a claim text whose specifics all occur in the ref."""
    text = ref["text"]
    if tool == "query_logs":
        message = text.split(": ", 1)[1]
        words = message.split()
        # "...failed after 1234ms with HTTP 503: upstream db-3 TimeoutException ..."
        after = words[words.index("after") + 1]
        status = words[words.index("HTTP") + 1].rstrip(":")
        service = text.split()[2]
        excerpt = message[: min(len(message), 120)]
        claim = f"{service} requests fail after {after} with HTTP {status} (TimeoutException)."
        return excerpt, claim
    if tool == "query_metrics" and ref["raw_path"].startswith("alerts"):
        head = text.split(" active_at=", 1)[0]
        name = head.split()[0]
        value = head.split("value=", 1)[1].split()[0]
        return head, f"{name} is firing at {value}."
    if tool == "query_metrics":
        metric = text.split("{", 1)[0]
        maximum = text.split("max=", 1)[1].split()[0]
        return text[: text.index(" last=")], f"{metric} peaked at {maximum}."
    return text[:80], "A runbook describes this pool exhaustion."


def claims(count: int, rows: list[dict[str, Any]], rng: random.Random) -> dict[str, Any]:
    """An executor_evidence_v2 answer with ``count`` claims citing real refs of ``rows``."""
    usable = [
        row for row in rows if row["status"] == "ok" and row["tool_name"] != "lookup_knowledge"
    ]
    out = []
    for index in range(count):
        bindings = []
        texts = []
        for _ in range(1 if index % 4 else 2):
            row = rng.choice(usable)
            refs = [
                r for r in row["retrieval_details"]["evidence_refs"] if r["raw_path"] != "summary"
            ]
            ref = rng.choice(refs)
            excerpt, text = _excerpt_and_text(ref, row["tool_name"])
            texts.append(text)
            bindings.append(
                {
                    "source_type": ref["source_type"],
                    "tool_name": row["tool_name"],
                    "source_invocation_id": row["invocation_id"],
                    "raw_path": ref["raw_path"],
                    "evidence_excerpt": excerpt,
                }
            )
        out.append(
            {
                "claim_id": f"c{index + 1}",
                "claim_type": "observation",
                "claim_text": " ".join(texts),
                "support_level": "direct",
                "evidence_bindings": bindings,
            }
        )
    return {
        "answer_version": "executor_evidence_v2",
        "claims": out,
        "hypotheses": [],
        "recommended_actions": [],
        "missing_info": [],
    }


def timed(func: Callable[[], Any], runs: int) -> tuple[list[float], Any]:
    """Run ``func`` ``runs`` times; milliseconds per run and the last result."""
    samples = []
    result = None
    for _ in range(runs):
        start = time.perf_counter()
        result = func()
        samples.append((time.perf_counter() - start) * 1000.0)
    return samples, result


def slope(t1: float, t2: float, n1: int, n2: int) -> float:
    """Log-log slope: 1 = linear, < 1 = better than linear, > 1 = worse."""
    return math.log(t2 / t1) / math.log(n2 / n1)


def per_10x(t1: float, t2: float, n1: int, n2: int) -> float:
    """Time factor for 10x more work at the measured slope."""
    return 10 ** slope(t1, t2, n1, n2)


def main(argv: list[str] | None = None) -> int:
    """Run the grid and print it."""
    runs, _ = run_count(__doc__, 15, 5, "5 repetitions per case", argv)

    rng = random.Random(20261130)
    print(f"Gatekeeper + trace summary scaling ({machine()}); median of {runs} runs per case")
    started = time.perf_counter()
    backend = SampleBackend(environment(rng))
    rows_by_n = {n: invocations(n, backend) for n in INVOCATIONS}
    print(f"Inputs built through the ToolRunner in {time.perf_counter() - started:.1f} s (untimed)")
    catalog_ms, _ = timed(load_catalog, 50)
    parse_status = {"status": "valid", "fence_stripped": False, "error": None}

    grid: dict[tuple[int, int], dict[str, float]] = {}
    target_answer: dict[str, Any] = {}
    table_rows = []
    for n in INVOCATIONS:
        rows = rows_by_n[n]
        refs = sum(len(row["retrieval_details"]["evidence_refs"]) for row in rows)
        trace_ms, trace = timed(lambda rows=rows: build_trace_summary(rows), runs)
        for c in CLAIMS:
            answer = claims(c, rows, rng)
            bindings = sum(len(claim["evidence_bindings"]) for claim in answer["claims"])
            gate_ms, gate = timed(
                lambda rows=rows, answer=answer: run_gatekeeper(parse_status, answer, rows), runs
            )
            rules_ms, _ = timed(
                lambda rows=rows, answer=answer, gate=gate: evaluate_rules(
                    rows, read_answer(parse_status, answer), gate
                ),
                runs,
            )
            if (n, c) == TARGET_CASE:
                target_answer = answer
            if gate["status"] != "pass":
                print(f"  note: {n}x{c} gatekeeper {gate['status']}: {gate['failed_rules']}")
            total = median(gate_ms) + median(trace_ms)
            grid[(n, c)] = {
                "gate": median(gate_ms),
                "trace": median(trace_ms),
                "total": total,
                "rules": median(rules_ms),
            }
            table_rows.append(
                [
                    str(n),
                    f"{refs:,}",
                    str(c),
                    str(bindings),
                    fmt(median(gate_ms)),
                    fmt(median(trace_ms)),
                    fmt(total),
                    fmt(percentile(gate_ms, 90) + percentile(trace_ms, 90)),
                    fmt(min(gate_ms) + min(trace_ms)),
                    fmt(median(rules_ms)),
                    str(len(trace)),
                    gate["status"],
                ]
            )
    print()
    print(
        table(
            [
                "invocations",
                "refs",
                "claims",
                "bindings",
                "gatekeeper ms",
                "trace ms",
                "gate+trace p50",
                "p90",
                "min",
                "rule_eval ms",
                "items",
                "status",
            ],
            table_rows,
        )
    )

    print("\nGrowth (slope of log time over log work: 1.00 = linear, < 1 = better than linear)")
    growth = []
    slopes = []

    def axis(label: str, at: str, points: list[tuple[int, float]]) -> None:
        steps = [
            f"{t2 / t1:.2f}x per {n2 // n1}x"
            for (n1, t1), (n2, t2) in zip(points, points[1:], strict=False)
        ]
        (n_first, t_first), (n_last, t_last) = points[0], points[-1]
        overall = slope(t_first, t_last, n_first, n_last)
        slopes.append(overall)
        growth.append([label, at, ", ".join(steps), fmt(10**overall) + "x", fmt(overall)])

    axis(
        "trace summary vs invocations",
        "-",
        [(n, grid[(n, CLAIMS[0])]["trace"]) for n in INVOCATIONS],
    )
    for n in INVOCATIONS:
        axis(
            "gatekeeper vs claims", f"{n} invocations", [(c, grid[(n, c)]["gate"]) for c in CLAIMS]
        )
    for c in CLAIMS:
        axis(
            "gate+trace vs invocations",
            f"{c} claims",
            [(n, grid[(n, c)]["total"]) for n in INVOCATIONS],
        )
    print(table(["what", "at", "measured steps", "per 10x", "slope"], growth))
    worst = max(slopes)

    print(
        f"Reading and validating the bundled catalog takes {median(catalog_ms):.2f} ms; it is"
        " done once per process (run_gatekeeper caches it), so it is not part of the figures."
    )
    n, c = TARGET_CASE
    case = grid[TARGET_CASE]
    print()
    print(
        verdict_line(
            case["total"] < TARGET_MS,
            f"{n} invocations + {c} claims: gatekeeper {case['gate']:.2f} ms + trace summary "
            f"{case['trace']:.2f} ms = {case['total']:.2f} ms (target < {TARGET_MS:.0f} ms)",
        )
    )
    rows = rows_by_n[n]
    gc.disable()
    try:
        paused_gate, _ = timed(lambda: run_gatekeeper(parse_status, target_answer, rows), runs)
        paused_trace, _ = timed(lambda: build_trace_summary(rows), runs)
    finally:
        gc.enable()
    paused = median(paused_gate) + median(paused_trace)
    print(
        f"The same case with the cyclic garbage collector paused: {median(paused_gate):.2f} + "
        f"{median(paused_trace):.2f} = {paused:.2f} ms."
    )
    if case["total"] >= TARGET_MS:
        answer = target_answer
        rows = rows_by_n[n]
        profiler = cProfile.Profile()
        # Collections would be charged to whichever function happened to allocate.
        gc.disable()
        try:
            profiler.enable()
            for _ in range(3):
                run_gatekeeper(parse_status, answer, rows)
                build_trace_summary(rows)
            profiler.disable()
        finally:
            gc.enable()
        print(
            f"\nWhat dominates the {n} x {c} case (cProfile, 3 runs, collector paused, "
            "top 15 by own time):"
        )
        stats = pstats.Stats(profiler)
        stats.sort_stats("tottime").print_stats(15)
    shape = "linear or better" if worst <= 1.1 else "worse than linear"
    print(f"Growth: {shape} (steepest end-to-end slope {worst:.2f}; 1.00 = linear).")

    # The in-memory ledger the CLI uses deep-copies rows on every read, and lookup_knowledge
    # reads all rows of the diagnosis to mark deduplicated documents.
    print("\nRecording cost with the in-memory ledger (ToolRunner.run, untimed above):")
    rec_rows = []
    for count in (10, 30, 100):
        runner = ToolRunner(backend, InMemoryLedger())
        start = time.perf_counter()
        for index in range(count):
            runner.run(tool_call(index), diagnosis_id="diag-ledger", thread_id="b", round=1)
        elapsed = (time.perf_counter() - start) * 1000.0
        rec_rows.append([str(count), fmt(elapsed), fmt(elapsed / count)])
    print(table(["tool calls", "total ms", "ms per call"], rec_rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
