"""Builders of the records tests feed the product code, and typed readers of what it stores.

Tool entries and invocations are built as the ``state.records`` records. What the executor writes
(claims, bindings, the ``executor_evidence_v2`` object) is untrusted JSON that the product reads
with ``verification.executor_output.read_answer``, so those builders give plain ``JSONObject``
values, exactly as a model would send them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

from pydantic import TypeAdapter
from typing_extensions import TypedDict, Unpack

from persistence.audit import verifier_evaluation_of
from state.records import (
    AlertEntry,
    DiagnosisRecord,
    DocumentEntry,
    EvidenceRef,
    GatekeeperResult,
    GatekeeperStatus,
    Invocation,
    InvocationDraft,
    InvocationStatus,
    JSONObject,
    JSONScalar,
    JSONValue,
    LogEntry,
    ParseStatus,
    RetrievalDetails,
    RuleEvaluation,
    SeriesEntry,
    Severity,
    TraceItem,
    VerifiedExcerpt,
    VerifierEvaluation,
)

VALID: ParseStatus = {"status": "valid", "fence_stripped": False, "error": None}
"""The parse status of an executor answer that parsed as JSON."""

# --------------------------------------------------------------------------- tool entries


def log_entry(
    message: str,
    *,
    timestamp: str = "2026-03-01T10:01:00Z",
    level: str = "ERROR",
    service: str = "order-service",
    instance: str | None = "order-1",
) -> LogEntry:
    """One log line (``instance`` None leaves the field out)."""
    entry = LogEntry(timestamp=timestamp, level=level, service=service, message=message)
    if instance is not None:
        entry["instance"] = instance
    return entry


def alert_entry(
    alert_name: str,
    value: JSONScalar,
    threshold: JSONScalar,
    summary: str,
    active_at: str,
    *,
    service: str = "order-service",
    severity: str = "critical",
    state: str = "firing",
) -> AlertEntry:
    """One alert with every field; a critical, firing alert of order-service by default."""
    alert = AlertEntry(alert_name=alert_name, service=service, severity=severity, state=state)
    measured = AlertEntry(value=value, threshold=threshold, summary=summary, active_at=active_at)
    return {**alert, **measured}


def series_entry(
    metric: str,
    min: float,
    max: float,
    last: float,
    *,
    labels: Mapping[str, str] | None = None,
    points_count: int = 36,
    unit: str = "",
) -> SeriesEntry:
    """One metric series (``min``, ``max``, ``last`` over the window); order-service by default."""
    labelled = dict(labels) if labels is not None else {"service": "order-service"}
    series = SeriesEntry(metric=metric, labels=labelled, points_count=points_count)
    return {**series, **SeriesEntry(min=min, max=max, last=last, unit=unit)}


class Ranking(TypedDict, total=False):
    """What knowledge lookup adds to a document."""

    score: float
    relevance: str
    deduped: bool


def document_entry(
    doc_id: str, title: str, *, source: str, chunk: str, **ranking: Unpack[Ranking]
) -> DocumentEntry:
    """One knowledge document; the ranking fields only when given."""
    return {**DocumentEntry(doc_id=doc_id, title=title, source=source, chunk=chunk), **ranking}


# --------------------------------------------------------------------------- invocations


def refs(*pairs: tuple[str, str], source_type: str = "log") -> list[EvidenceRef]:
    """Evidence refs from ``(raw_path, text)`` pairs."""
    return [EvidenceRef(raw_path=path, text=text, source_type=source_type) for path, text in pairs]


class CallOptions(TypedDict, total=False):
    """How a tool call went: ``ok`` in round 1 with no output and no evidence refs by default."""

    status: InvocationStatus
    output: Mapping[str, object] | None
    """The tool's output, e.g. a ``tools.query_logs.LogsResult``."""
    details: RetrievalDetails
    round: int
    error: str | None


def json_output(output: Mapping[str, object] | None) -> JSONObject | None:
    """A tool output (a typed result) as the JSON object an invocation holds."""
    return cast(JSONObject, output) if output is not None else None


def invocation_draft(
    tool_name: str,
    arguments: JSONObject | None = None,
    *,
    diagnosis_id: str = "diag-1",
    idempotency_key: str = "call-1",
    **options: Unpack[CallOptions],
) -> InvocationDraft:
    """A tool call as run, before the ledger gives it its id."""
    return InvocationDraft(
        arguments={} if arguments is None else arguments,
        diagnosis_id=diagnosis_id,
        thread_id="thread-1",
        round=options.get("round", 1),
        tool_name=tool_name,
        retrieval_details=options.get("details", RetrievalDetails(evidence_refs=[])),
        status=options.get("status", "ok"),
        output=json_output(options.get("output")),
        error=options.get("error"),
        idempotency_key=idempotency_key,
        started_at="2026-03-01T10:30:00Z",
        duration_ms=3.0,
    )


def invocation(
    invocation_id: str,
    tool_name: str,
    arguments: JSONObject | None = None,
    **options: Unpack[CallOptions],
) -> Invocation:
    """A recorded tool call of diagnosis ``diag-1``."""
    key = f"call-{invocation_id}"
    draft = invocation_draft(tool_name, arguments, idempotency_key=key, **options)
    return Invocation(**draft, invocation_id=invocation_id)


# --------------------------------------------------------------------------- executor answer


def binding(
    invocation_id: str | None,
    raw_path: str | None,
    excerpt: str,
    *,
    tool_name: str = "query_logs",
    source_type: str = "log",
) -> JSONObject:
    """One evidence binding as the executor writes it (a None id or path leaves the key out)."""
    pointers = {"source_invocation_id": invocation_id, "raw_path": raw_path}
    return {
        "source_type": source_type,
        "tool_name": tool_name,
        **{key: value for key, value in pointers.items() if value is not None},
        "evidence_excerpt": excerpt,
    }


def claim(
    claim_id: str,
    text: str,
    *bindings: JSONObject,
    claim_type: str = "observation",
    support_level: str = "direct",
) -> JSONObject:
    """One claim as the executor writes it."""
    kind: JSONObject = {"claim_type": claim_type, "support_level": support_level}
    return {"claim_id": claim_id, "claim_text": text, **kind, "evidence_bindings": [*bindings]}


def executor_output(
    *claims: JSONObject,
    hypotheses: list[JSONValue] | None = None,
    recommended_actions: list[JSONValue] | None = None,
    missing_info: list[JSONValue] | None = None,
) -> JSONObject:
    """An ``executor_evidence_v2`` object, as the executor's final answer holds it."""
    return {
        "answer_version": "executor_evidence_v2",
        "claims": [*claims],
        "hypotheses": hypotheses or [],
        "recommended_actions": recommended_actions or [],
        "missing_info": missing_info or [],
    }


# --------------------------------------------------------------------------- Gatekeeper, trace


def excerpt(inv: str, tool: str, path: str, text: str, *, binding: int = 0) -> VerifiedExcerpt:
    """A binding the Gatekeeper verified: invocation ``inv`` of ``tool``, ref ``path``."""
    return VerifiedExcerpt(
        binding=binding, invocation_id=inv, tool_name=tool, raw_path=path, text=text
    )


def gatekeeper_result(
    verified_excerpts: dict[str, list[VerifiedExcerpt]] | None = None,
    *,
    status: GatekeeperStatus = "pass",
    severity: Severity = "none",
    checked_bindings: int | None = None,
) -> GatekeeperResult:
    """A Gatekeeper result with no findings; ``checked_bindings`` defaults to the excerpts."""
    excerpts = {} if verified_excerpts is None else verified_excerpts
    checked = sum(len(found) for found in excerpts.values())
    return GatekeeperResult(
        status=status,
        severity=severity,
        checked_bindings=checked if checked_bindings is None else checked_bindings,
        failed_rules=[],
        warnings=[],
        errors=[],
        verified_excerpts=excerpts,
        rule_set_version="test",
        rules=[],
    )


def trace_item(
    trace_ref: str,
    tool_name: str,
    source_invocation_ids: list[str],
    *,
    input_summary: str = "",
    output_summary: str = "",
) -> TraceItem:
    """One successful line of the Verifier's trace summary, of round 1."""
    return TraceItem(
        trace_ref=trace_ref,
        tool_name=tool_name,
        round=1,
        success=True,
        evidence_level="direct",
        input_summary=input_summary,
        output_summary=output_summary,
        source_invocation_ids=source_invocation_ids,
    )


# --------------------------------------------------------------------------- reading JSON


def json_object(value: JSONValue) -> JSONObject:
    """A JSON value that must be an object."""
    assert isinstance(value, dict), value
    return value


def json_list(value: JSONValue) -> list[JSONValue]:
    """A JSON value that must be an array."""
    assert isinstance(value, list), value
    return value


def evaluation_of(record: DiagnosisRecord | None) -> VerifierEvaluation:
    """The stored verifier evaluation of a diagnosis record, which must have one."""
    assert record is not None, "no diagnosis record"
    evaluation = verifier_evaluation_of(record)
    assert evaluation is not None, f"diagnosis {record['id']} has no verifier evaluation"
    return evaluation


_RULE_EVALUATION: TypeAdapter[RuleEvaluation] = TypeAdapter(RuleEvaluation)


def rule_evaluation_of(record: DiagnosisRecord) -> RuleEvaluation:
    """The stored ``rule_evaluation`` channel of a diagnosis record, which must be there."""
    channels = record["self_evaluation"]
    assert channels is not None, f"diagnosis {record['id']} has no self_evaluation"
    return _RULE_EVALUATION.validate_python(channels.get("rule_evaluation"))
