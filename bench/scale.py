"""How the per-diagnosis work grows with the number of invocations (1,000 to 10,000).

Invocations are real: generated calls (``bench/gatekeeper_scaling.py``) run through the real
ToolRunner over a generated environment. Timed per size: ``build_trace_summary`` over all rows,
the Verifier payload (``build_payload`` + ``render_payload`` with that trace and a Gatekeeper
result of a three-claim answer), and recording the rows in an ``InMemoryLedger`` and in an
SQLite ``SqlLedger``. Slopes are of log time over log invocations (1.00 = linear).

Targets: every slope at most 1.15 (linear with measuring noise) and the payload build at most
50 ms at 10,000 invocations.

    .venv/bin/python bench/scale.py [--runs N] [--quick]
"""

from __future__ import annotations

import json
import random
import tempfile
from pathlib import Path
from typing import Any

from _common import VALID_PARSE, Targets, fmt, machine, median, run_count, table, verifier_input
from gatekeeper_scaling import environment, invocations, slope, timed

from evidence.sample import SampleBackend
from persistence.database import open_database
from persistence.ledger import InMemoryLedger, SqlLedger
from verification.gatekeeper import run_gatekeeper
from verification.trace_summary import build_trace_summary
from verification.verifier_payload import build_payload, render_payload

PAYLOAD_TARGET_MS = 50.0
SLOPE_TARGET = 1.15
QUESTION = "Is order-service returning HTTP 500 errors, and why?"


def answer_of(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A three-claim answer citing the first evidence rows (summary refs)."""
    claims = []
    for row in [r for r in rows if r["retrieval_details"].get("evidence_refs")][:3]:
        ref = row["retrieval_details"]["evidence_refs"][-1]
        claims.append(
            {
                "claim_id": f"c{len(claims) + 1}",
                "claim_type": "observation",
                "claim_text": f"{row['tool_name']} was called",
                "support_level": "direct",
                "evidence_bindings": [
                    {
                        "source_type": ref.get("source_type", "log"),
                        "tool_name": row["tool_name"],
                        "source_invocation_id": row["invocation_id"],
                        "raw_path": ref["raw_path"],
                        "evidence_excerpt": ref["text"][:40],
                    }
                ],
            }
        )
    return {
        "answer_version": "executor_evidence_v2",
        "claims": claims,
        "hypotheses": [],
        "recommended_actions": [],
        "missing_info": [],
    }


def drafts(rows: list[dict[str, Any]], tag: str) -> list[Any]:
    return [
        {
            key: value
            for key, value in {**row, "idempotency_key": f"{tag}-{row['idempotency_key']}"}.items()
            if key != "invocation_id"
        }
        for row in rows
    ]


def main(argv: list[str] | None = None) -> int:
    runs, quick = run_count(__doc__ or "", 5, 2, "2 runs, up to 3,000 invocations", argv)
    sizes = (1_000, 3_000) if quick else (1_000, 3_000, 10_000)
    backend = SampleBackend(environment(random.Random(20261130)))
    biggest = invocations(max(sizes), backend)
    results: dict[str, dict[int, float]] = {
        "trace summary": {},
        "verifier payload": {},
        "ledger record (memory)": {},
        "ledger record (SQLite)": {},
    }
    folder = tempfile.mkdtemp(prefix="bench-scale-")
    for size in sizes:
        rows = biggest[:size]
        samples, trace = timed(lambda rows=rows: build_trace_summary(rows), runs)
        results["trace summary"][size] = median(samples)
        answer = answer_of(rows)
        gate = run_gatekeeper(VALID_PARSE, answer, rows)  # type: ignore[arg-type]
        inputs = verifier_input(
            question=QUESTION,
            final_answer=json.dumps(answer),
            structured_output=answer,
            trace_summary=trace,
            gatekeeper_result=gate,
        )
        samples, _ = timed(lambda inputs=inputs: render_payload(build_payload(inputs)), runs)
        results["verifier payload"][size] = median(samples)

        prepared = drafts(rows, "m")  # built outside the timing: it measures the ledger only

        def memory(prepared: list[Any] = prepared) -> None:
            ledger = InMemoryLedger()
            for draft in prepared:
                ledger.record(draft)

        samples, _ = timed(memory, runs)
        results["ledger record (memory)"][size] = median(samples)
        db = open_database(f"sqlite:///{Path(folder) / f'scale-{size}.sqlite'}")
        try:
            sql = SqlLedger(db)

            fresh = drafts(rows, "s")  # timed once below: a second run would find every key

            def sqlite(sql: SqlLedger = sql, fresh: list[Any] = fresh) -> None:
                for draft in fresh:
                    sql.record(draft)

            samples, _ = timed(sqlite, 1)
            results["ledger record (SQLite)"][size] = median(samples)
        finally:
            db.close()
    print(f"machine: {machine()}; {runs} runs per case (SQLite ledger: 1)")
    headers = ["what", *(f"{n:,} ms" for n in sizes), "slope"]
    rows_out = []
    targets = Targets()
    for name, by_size in results.items():
        low, high = sizes[0], sizes[-1]
        s = slope(by_size[low], by_size[high], low, high)
        rows_out.append([name, *(fmt(by_size[n]) for n in sizes), fmt(s)])
        targets.check(s <= SLOPE_TARGET, f"{name}: slope {s:.2f} <= {SLOPE_TARGET}")
    print(table(headers, rows_out))
    at = results["verifier payload"][sizes[-1]]
    targets.check(
        at <= PAYLOAD_TARGET_MS,
        f"verifier payload at {sizes[-1]:,} invocations: {at:.1f} ms <= {PAYLOAD_TARGET_MS}",
    )
    return targets.summary()


if __name__ == "__main__":
    raise SystemExit(main())
