"""A real local model over questions with known answers: tool calls, grounding, verdicts, leaks.

Runs ``superbiz diagnose`` in model mode against an OpenAI-compatible endpoint (by default the
local Qwen2.5-Coder-1.5B of ``local-model.sh``: ``OPENAI_BASE_URL=http://127.0.0.1:18081/v1``)
over questions on environments whose answers are known (the offline scenarios of the bundled
sample and of the scenario environments, both languages), then reads each diagnosis's record
(``superbiz sessions show --json``) and reports per question and in total:

- tool calls made, native and read from the reply text;
- the share of claims whose citations pass the Gatekeeper (verified excerpts), and whether the
  diagnosis ended with at least one such claim;
- the verdict, and whether the answer contains the expected facts (from the scenario);
- leaks: a claim the answer shows as confirmed although the Gatekeeper verified no excerpt for
  it, or the deterministic claim checker does not find it in its evidence (must be 0);
- model calls, prompt and completion tokens per role and per diagnosis, seconds.

Targets: tool calls on >= 80 % of diagnoses, >= half ending with claims that pass the
Gatekeeper, >= 3 PASS with the expected facts, 0 leaks. Each diagnosis takes minutes on a CPU:
``--limit N`` runs the first N questions (``--only ID...`` those named), ``--db FILE`` keeps
the records, ``--out FILE`` appends one JSON line per diagnosis as it
finishes (``--table FILE`` prints the table of such a file again). Not a test: it always exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "tests" / "scenarios" / "offline"
QUESTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("offline-sample-why-500-en", ("status=500",)),
    ("offline-sample-why-500-zh", ("status=500",)),
    ("offline-sample-confirm-alerting-en", ("OrderServiceHigh5xxRate",)),
    ("offline-sample-value-cpu-en", ()),
    ("offline-sample-value-cpu-zh", ()),
    ("offline-sample-value-p99-en", ()),
    ("offline-kafka-value-lag-zh", ("48210",)),
    ("offline-kafka-value-lag-en", ()),
    ("offline-kafka-confirm-alert-en", ()),
    ("offline-invoice-value-disk-en", ()),
    ("offline-invoice-value-disk-zh", ()),
    ("offline-invoice-confirm-alert-en", ()),
)
"""Scenario ids; the expected facts are the given strings, else the scenario's data strings."""
TARGET_TOOL_SHARE = 0.8
TARGET_GROUNDED_SHARE = 0.5
TARGET_PASS_WITH_FACTS = 3


def expected_facts(scenario: dict[str, Any], given: tuple[str, ...]) -> list[str]:
    """The facts an answer must contain: ``given``, else the scenario's data strings."""
    if given:
        return list(given)
    contains = scenario.get("expect", {}).get("answer_contains", [])
    data = [
        text
        for text in contains
        if not text.startswith(("Runbook", "《", "Yes", "No", "是", "否")) and len(text) > 2
    ]
    return data[:2]


def _run(args: list[str], env: dict[str, str], timeout: float) -> tuple[int, str, str]:
    done = subprocess.run(
        args, capture_output=True, text=True, env=env, timeout=timeout, check=False
    )
    return done.returncode, done.stdout, done.stderr


def leaks_of(record: dict[str, Any]) -> list[str]:
    """Claims shown as confirmed that no verified excerpt or deterministic check supports."""
    sys.path.insert(0, str(ROOT))
    from verification.catalog import SchemaSettings
    from verification.claim_checker import check_claims
    from verification.executor_output import read_answer

    evaluation = record["self_evaluation"]["verifier_evaluation"]
    confirmed = record["self_evaluation"]["replay"].get("confirmed_claims") or []
    if not confirmed:
        return []
    gatekeeper = evaluation["gatekeeper_result"]
    verified = gatekeeper.get("verified_excerpts") or {}
    structured = evaluation.get("executor_structured_output")
    status = evaluation.get("executor_output_parse_status")
    answer = read_answer(status, structured, SchemaSettings())
    checker = check_claims(
        answer,
        gatekeeper,
        evaluation.get("tool_trace_summary") or [],
        known_services=record["self_evaluation"]["replay"].get("known_services") or [],
    )
    labels = {check["claim_id"]: check["verification"] for check in checker["claim_checks"]}
    return [
        claim_id
        for claim_id in confirmed
        if not verified.get(claim_id)
        or labels.get(claim_id) not in ("direct_observation", "reasonable_inference")
    ]


def measure(record: dict[str, Any], facts: list[str]) -> dict[str, Any]:
    """The figures of one diagnosis from its record."""
    evaluation = record["self_evaluation"]["verifier_evaluation"]
    calls = record["self_evaluation"]["replay"]["model_calls"]
    sources: Counter[str] = Counter()
    per_role: dict[str, list[int]] = {}
    cut = 0
    for call in calls:
        role = per_role.setdefault(call["role"], [0, 0, 0])
        role[0] += 1
        role[1] += int(call["input_tokens"])
        role[2] += int(call["output_tokens"])
        for _ in call.get("tool_calls") or []:
            sources[call.get("tool_call_source") or "native"] += 1
        cut += call.get("finish_reason") == "length"
    structured = evaluation.get("executor_structured_output") or {}
    claims = [c.get("claim_id") for c in structured.get("claims") or [] if isinstance(c, dict)]
    gatekeeper = evaluation["gatekeeper_result"]
    verified = gatekeeper.get("verified_excerpts") or {}
    failed = {error.get("claim_id") for error in gatekeeper.get("errors") or []}
    # A claim passes when it has a verified excerpt and no Gatekeeper error names it.
    passing = [claim for claim in claims if verified.get(claim) and claim not in failed]
    answer = record.get("final_answer") or ""
    return {
        "verdict": record.get("verdict"),
        "invocations": len(record.get("invocations") or []),
        "tool_calls_native": sources["native"],
        "tool_calls_text": sources["text"],
        # Plan steps the executor ran as written when the model made no call (not the model's).
        "tool_calls_plan": sum(
            1
            for row in record.get("invocations") or []
            if ":plan-" in str(row.get("idempotency_key") or "")
        ),
        "claims": len(claims),
        "claims_passing_gatekeeper": len(passing),
        "facts": facts,
        "facts_present": bool(facts) and all(fact in answer for fact in facts),
        "leaks": leaks_of(record),
        "model_calls": len(calls),
        "replies_cut": cut,
        "tokens_per_role": per_role,
        "prompt_tokens": sum(r[1] for r in per_role.values()),
        "completion_tokens": sum(r[2] for r in per_role.values()),
    }


def run_one(scenario_id: str, given: tuple[str, ...], db: str, timeout: float) -> dict[str, Any]:
    """Diagnose one scenario's question in model mode and measure it."""
    path = SCENARIOS / f"{scenario_id}.json"
    scenario = json.loads(path.read_text(encoding="utf-8"))
    env = dict(os.environ)
    env.setdefault("SUPERBIZ_MODEL_PROFILE", "local")
    env.pop("SUPERBIZ_OFFLINE", None)
    cli = [str(Path(sys.executable).parent / "superbiz")]
    started = time.monotonic()
    code, out, err = _run(
        [
            *cli,
            "diagnose",
            "--json",
            "--lang",
            scenario["language"],
            "--env",
            str(path),
            "--db",
            db,
            scenario["question"],
        ],
        env,
        timeout,
    )
    seconds = time.monotonic() - started
    row: dict[str, Any] = {
        "scenario": scenario_id,
        "language": scenario["language"],
        "question": scenario["question"],
        "seconds": round(seconds, 1),
        "exit": code,
    }
    try:
        diagnosis = json.loads(out)["diagnosis_id"]
    except (json.JSONDecodeError, KeyError, TypeError):
        row["error"] = (err.strip().splitlines() or ["no output"])[-1][:300]
        return row
    _, shown, _ = _run([*cli, "sessions", "show", "--json", "--db", db, diagnosis], env, 120)
    record = json.loads(shown)
    if "verifier_evaluation" not in record.get("self_evaluation", {}):
        # A diagnosis that failed before its verification (the endpoint went away, a deadline)
        # has nothing to measure: it counts as failed, with the reason its record gives.
        row["error"] = f"{record.get('status')}: {str(record.get('note') or '')[:300]}"
        row["diagnosis"] = diagnosis
        return row
    row.update(measure(record, expected_facts(scenario, given)))
    row["diagnosis"] = diagnosis
    return row


def table(rows: list[dict[str, Any]]) -> str:
    """The per-question table and the totals with each target met or missed."""
    lines = [
        "| question | lang | verdict | tool calls native/text | claims passing GK | facts | "
        "leaks | model calls | prompt/completion tokens | s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        if "error" in row:
            lines.append(
                f"| {row['scenario']} | {row['language']} | failed: {row['error'][:80]} "
                f"| - | - | - | - | - | - | {row['seconds']:.0f} |"
            )
            continue
        planned = row.get("tool_calls_plan", 0)
        lines.append(
            f"| {row['scenario']} | {row['language']} | {row['verdict']} | "
            f"{row['tool_calls_native']}/{row['tool_calls_text']}"
            f"{f' (+{planned} plan)' if planned else ''} | "
            f"{row['claims_passing_gatekeeper']}/{row['claims']} | "
            f"{'yes' if row['facts_present'] else 'no'} | {len(row['leaks'])} | "
            f"{row['model_calls']} | {row['prompt_tokens']}/{row['completion_tokens']} | "
            f"{row['seconds']:.0f} |"
        )
    done = [row for row in rows if "error" not in row]
    n = len(rows) or 1
    called = sum(1 for row in done if row["tool_calls_native"] + row["tool_calls_text"] > 0)
    grounded = sum(1 for row in done if row["claims_passing_gatekeeper"] > 0)
    passed = sum(1 for row in done if row["verdict"] == "PASS" and row["facts_present"])
    leaks = sum(len(row["leaks"]) for row in done)
    claims = sum(row["claims"] for row in done)
    passing = sum(row["claims_passing_gatekeeper"] for row in done)
    roles: dict[str, list[int]] = {}
    for row in done:
        for role, (count, prompt, completion) in row["tokens_per_role"].items():
            total = roles.setdefault(role, [0, 0, 0])
            total[0] += count
            total[1] += prompt
            total[2] += completion
    verdicts = Counter(str(row.get("verdict")) for row in done)

    def met(ok: bool) -> str:
        return "TARGET MET" if ok else "TARGET MISSED"

    lines += [
        "",
        f"diagnoses: {len(rows)} ({len(rows) - len(done)} failed); verdicts: "
        + ", ".join(f"{k} {v}" for k, v in sorted(verdicts.items())),
        f"tool calls made: {called}/{len(rows)} = {called / n:.0%} (target >= 80 %): "
        f"{met(called / n >= TARGET_TOOL_SHARE)}; native "
        f"{sum(r['tool_calls_native'] for r in done)}, from text "
        f"{sum(r['tool_calls_text'] for r in done)}; plan steps run as written (not counted) "
        f"{sum(r.get('tool_calls_plan', 0) for r in done)}",
        f"ended with claims passing the Gatekeeper: {grounded}/{len(rows)} = {grounded / n:.0%} "
        f"(target >= 50 %): {met(grounded / n >= TARGET_GROUNDED_SHARE)}; claims passing "
        f"{passing}/{claims}",
        f"PASS with the expected facts: {passed} (target >= 3): "
        f"{met(passed >= TARGET_PASS_WITH_FACTS)}",
        f"leaks: {leaks} (target 0): {met(leaks == 0)}",
        "tokens per role (calls, prompt, completion): "
        + "; ".join(f"{role} {c}, {p}, {o}" for role, (c, p, o) in sorted(roles.items())),
        f"per diagnosis: {sum(r['model_calls'] for r in done) / max(len(done), 1):.1f} model "
        f"calls, {sum(r['prompt_tokens'] for r in done) / max(len(done), 1):.0f} prompt and "
        f"{sum(r['completion_tokens'] for r in done) / max(len(done), 1):.0f} completion tokens,"
        f" {sum(r['seconds'] for r in rows) / n:.0f} s; replies cut at max_tokens: "
        f"{sum(r['replies_cut'] for r in done)}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the questions (or print the table of an earlier run)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=len(QUESTIONS))
    parser.add_argument("--out", help="append one JSON line per diagnosis to this file")
    parser.add_argument("--table", help="print the table of an earlier --out file and stop")
    parser.add_argument(
        "--db",
        help="with --table: the database of that run, to measure again; otherwise the database "
        "the run keeps its records in (default: a temporary one, removed at the end)",
    )
    parser.add_argument("--only", nargs="*", help="run only these scenario ids")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per diagnosis")
    args = parser.parse_args(argv)
    if args.table:
        rows = [json.loads(line) for line in Path(args.table).read_text().splitlines() if line]
        if args.db:  # measure again from the stored records (the figures' rules may have changed)
            cli = [str(Path(sys.executable).parent / "superbiz")]
            for row in rows:
                if "diagnosis" not in row:
                    continue
                shown = _run(
                    [*cli, "sessions", "show", "--json", "--db", args.db, row["diagnosis"]],
                    dict(os.environ),
                    120,
                )[1]
                row.update(measure(json.loads(shown), row["facts"]))
        print(table(rows))
        return 0
    if not os.environ.get("OPENAI_API_KEY"):
        print("set OPENAI_API_KEY, OPENAI_BASE_URL and SUPERBIZ_MODEL (local-model.sh start)")
        return 0
    print(
        f"model {os.environ.get('SUPERBIZ_MODEL')} at {os.environ.get('OPENAI_BASE_URL')}; "
        f"load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    rows: list[dict[str, Any]] = []
    chosen = [q for q in QUESTIONS if not args.only or q[0] in args.only][: args.limit]
    with tempfile.TemporaryDirectory() as folder:
        db = args.db or str(Path(folder) / "bench.sqlite")
        for scenario_id, given in chosen:
            try:
                row = run_one(scenario_id, given, db, args.timeout)
            except subprocess.TimeoutExpired:
                row = {
                    "scenario": scenario_id,
                    "language": "-",
                    "seconds": args.timeout,
                    "error": f"no answer within {args.timeout:.0f} s",
                }
            rows.append(row)
            print(json.dumps(row, ensure_ascii=False), flush=True)
            if args.out:
                with open(args.out, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
