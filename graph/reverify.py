"""``superbiz reverify``: re-run the Gatekeeper and the Verifier on a diagnosis's stored evidence.

No tool is called again: the invocations come from the ledger, the executor's output and the
Gatekeeper's rule catalog from the audit record (a record made before the catalog was kept is
re-checked on the bundled one). The Verifier's input is built as the graph node builds it
(``nodes.verifier.verifier_input``) and the verdict is decided by ``verification.verdict.decide``
alone. The result says what changed against the recorded verdict.
"""

from __future__ import annotations

from typing_extensions import TypedDict

from models.budget import GetModel
from nodes.verifier import verifier_input, verify
from persistence.audit import AuditStore, StoredRecordError, verifier_evaluation_of
from persistence.ledger import InvocationLedger
from state.context import Context
from state.records import (
    ClaimCheck,
    GatekeeperResult,
    RuleId,
    VerifierMode,
    VerifierResult,
)
from verification.catalog import CatalogError, settings_for
from verification.executor_output import read_answer
from verification.gatekeeper import gatekeep
from verification.trace_summary import build_trace_summary
from verification.verdict import is_looser


class NotReverifiable(LookupError):
    """The diagnosis is unknown or has no readable recorded verifier evaluation."""


class Outcome(TypedDict):
    """A verdict and what it rests on, before or after the re-check."""

    verdict: str | None
    groundedness_score: float | None
    gatekeeper_status: str
    failed_rules: list[RuleId]
    rule_set_version: str
    labels: dict[str, str]


class Report(TypedDict):
    """What ``reverify`` found."""

    diagnosis_id: str
    invocations: int
    verifier_mode: VerifierMode
    before: Outcome
    after: Outcome
    changes: list[str]
    loosened: bool
    verifier_result: VerifierResult
    gatekeeper_result: GatekeeperResult


def _outcome(
    verdict: str | None,
    score: float | None,
    gatekeeper: GatekeeperResult,
    checks: list[ClaimCheck],
) -> Outcome:
    return Outcome(
        verdict=verdict,
        groundedness_score=score,
        gatekeeper_status=gatekeeper["status"],
        failed_rules=gatekeeper["failed_rules"],
        rule_set_version=gatekeeper["rule_set_version"],
        labels={check["claim_id"]: check["verification"] for check in checks},
    )


def reverify(
    diagnosis_id: str,
    *,
    audit: AuditStore,
    ledger: InvocationLedger,
    get_model: GetModel,
    context: Context,
) -> Report:
    """Re-check a recorded diagnosis; return before, after and the list of changes.

    Raises:
        NotReverifiable: when there is nothing readable recorded to re-check.
    """
    record = audit.get(diagnosis_id)
    if record is None:
        raise NotReverifiable(f"no diagnosis {diagnosis_id!r}; see superbiz sessions list")
    try:
        evaluation = verifier_evaluation_of(record)
    except StoredRecordError as exc:
        raise NotReverifiable(str(exc)) from None
    if evaluation is None:
        raise NotReverifiable(
            f"diagnosis {diagnosis_id!r} has no recorded verifier evaluation "
            f"(status {record['status']}); finish it first with superbiz diagnose --resume"
        )
    try:
        settings = settings_for(evaluation.get("gatekeeper_catalog"))
    except CatalogError as exc:
        raise NotReverifiable(f"diagnosis {diagnosis_id!r}: its recorded {exc}") from None
    invocations = ledger.list(diagnosis_id)
    parse_status = evaluation["executor_output_parse_status"]
    structured = evaluation["executor_structured_output"]
    answer = read_answer(parse_status, structured, settings.schema)
    gatekeeper_result = gatekeep(answer, invocations, settings, question=record["question"])
    services = sorted(
        {str(i["arguments"]["service"]) for i in invocations if i["arguments"].get("service")}
    )
    inputs = verifier_input(
        question=record["question"],
        round=record["rounds"] or 1,
        final_answer=evaluation["executor_final_answer"],
        parse_status=parse_status,
        structured_output=structured,
        answer=answer,
        gatekeeper_result=gatekeeper_result,
        trace_summary=build_trace_summary(invocations),
        retry_context=evaluation["retry_context"],
        not_run=evaluation.get("question_coverage", {}).get("not_run", []),
    )
    result = verify(
        get_model("verifier", context),
        inputs,
        services,
        recheck_of=evaluation["verifier_mode"],
    )
    before = _outcome(
        record["verdict"],
        record["score"],
        evaluation["gatekeeper_result"],
        evaluation["claim_checks"],
    )
    after = _outcome(
        result["verdict"], result["groundedness_score"], gatekeeper_result, result["claim_checks"]
    )
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
    loosened = is_looser(after["verdict"], before["verdict"])
    if loosened:
        changes.insert(
            0,
            f"the re-check is LOOSER than the recorded verdict ({before['verdict']} -> "
            f"{after['verdict']}); the recorded verdict is not changed",
        )
    for claim_id in sorted(set(before["labels"]) | set(after["labels"])):
        old, new = before["labels"].get(claim_id), after["labels"].get(claim_id)
        if old != new:
            changes.append(f"claim {claim_id}: {old} -> {new}")
    return Report(
        diagnosis_id=diagnosis_id,
        invocations=len(invocations),
        verifier_mode=result["verifier_mode"],
        before=before,
        after=after,
        changes=changes,
        loosened=loosened,
        verifier_result=result,
        gatekeeper_result=gatekeeper_result,
    )
