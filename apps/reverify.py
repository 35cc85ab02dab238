"""``superbiz reverify``: re-run the Gatekeeper and the Verifier on a diagnosis's stored evidence.

No tool is called again: the invocations come from the ledger, the executor's output from the
audit record. The result says what changed against the recorded verdict.
"""

from __future__ import annotations

from typing import Any

from nodes.common import GetModel
from nodes.verifier import verify
from persistence.audit import AuditStore
from persistence.ledger import InvocationLedger
from state.context import Context
from tools.trace_summary import build_trace_summary
from verification.gatekeeper import run_gatekeeper


class NotReverifiable(LookupError):
    """The diagnosis is unknown or has no recorded verifier evaluation."""


def _labels(checks: list[dict[str, Any]]) -> dict[str, str]:
    return {str(c.get("claim_id")): str(c.get("verification")) for c in checks}


def reverify(
    diagnosis_id: str,
    *,
    audit: AuditStore,
    ledger: InvocationLedger,
    get_model: GetModel,
    context: Context,
) -> dict[str, Any]:
    """Re-check a recorded diagnosis; return before, after and the list of changes.

    Raises:
        NotReverifiable: when there is nothing recorded to re-check.
    """
    record = audit.get(diagnosis_id)
    if record is None:
        raise NotReverifiable(f"no diagnosis {diagnosis_id!r}; see superbiz sessions list")
    evaluation = (record.get("self_evaluation") or {}).get("verifier_evaluation")
    if not evaluation:
        raise NotReverifiable(
            f"diagnosis {diagnosis_id!r} has no recorded verifier evaluation "
            f"(status {record['status']}); finish it first with superbiz diagnose --resume"
        )
    invocations = ledger.list(diagnosis_id)
    parse_status = evaluation.get("executor_output_parse_status") or {"status": "missing"}
    structured = evaluation.get("executor_structured_output")
    gatekeeper_result = run_gatekeeper(parse_status, structured, invocations)
    trace_summary = build_trace_summary(invocations)
    services = sorted(
        {str(i["arguments"]["service"]) for i in invocations if i["arguments"].get("service")}
    )
    result = verify(
        get_model("verifier", context),
        question=str(record["question"]),
        final_answer=str(evaluation.get("executor_final_answer") or ""),
        parse_status=parse_status,
        structured=structured,
        trace_summary=trace_summary,
        gatekeeper_result=gatekeeper_result,
        retry_context=evaluation.get("retry_context"),
        round_no=int(record.get("rounds") or 1),
        known_services=services,
    )
    old_gate = evaluation.get("gatekeeper_result") or {}
    before = {
        "verdict": record.get("verdict"),
        "groundedness_score": record.get("score"),
        "gatekeeper_status": old_gate.get("status"),
        "failed_rules": old_gate.get("failed_rules", []),
        "rule_set_version": old_gate.get("rule_set_version"),
        "labels": _labels(evaluation.get("claim_checks") or []),
    }
    after = {
        "verdict": result["verdict"],
        "groundedness_score": result["groundedness_score"],
        "gatekeeper_status": gatekeeper_result.get("status"),
        "failed_rules": gatekeeper_result.get("failed_rules", []),
        "rule_set_version": gatekeeper_result.get("rule_set_version"),
        "labels": _labels(result.get("claim_checks") or []),
    }
    changes = [
        f"{key}: {before[key]!r} -> {after[key]!r}"
        for key in (
            "verdict",
            "groundedness_score",
            "gatekeeper_status",
            "failed_rules",
            "rule_set_version",
        )
        if before[key] != after[key]
    ]
    for claim_id in sorted(set(before["labels"]) | set(after["labels"])):
        old, new = before["labels"].get(claim_id), after["labels"].get(claim_id)
        if old != new:
            changes.append(f"claim {claim_id}: {old} -> {new}")
    return {
        "diagnosis_id": diagnosis_id,
        "invocations": len(invocations),
        "verifier_mode": result.get("verifier_mode"),
        "before": before,
        "after": after,
        "changes": changes,
        "verifier_result": result,
        "gatekeeper_result": gatekeeper_result,
    }
