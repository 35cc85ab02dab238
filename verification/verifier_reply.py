"""The Verifier's reply: parsed strictly, then read into a ``VerifierReply``.

A reply is usable when it is exactly one JSON object (one surrounding code fence tolerated) with
a ``claim_checks`` array and a known ``verdict``; otherwise the reason is worded for the model to
repair its reply. Reading keeps what is well formed and notes what is not; whether a check names
a real claim, a real trace item and a known label is decided by ``verification.verdict``.
"""

from __future__ import annotations

from state.display import clip, one_line
from state.records import (
    COVERAGE_STATUSES,
    VERDICTS,
    CoverageReport,
    JSONObject,
    JSONValue,
    ProposedCheck,
    RawCitation,
    VerifierReply,
)
from verification.executor_output import parse_json
from verification.text import normalize_id, strip_fence

_NOTE_CHARS = 80


def short(value: object) -> str:
    """A value for a human-readable note, bounded."""
    return clip(value if isinstance(value, str) else repr(value), _NOTE_CHARS)


def parse_verifier_reply(text: str) -> tuple[JSONObject | None, bool, str | None]:
    """Strictly parse one Verifier reply.

    Returns:
        ``(object, fence_stripped, error)``: the object when the reply is usable; otherwise None
        and the reason.
    """
    body, fenced = strip_fence(text)
    if not body:
        return None, fenced, "the reply was empty"
    data, error = parse_json(body)
    if error is not None:
        return None, fenced, f"not a single JSON object ({error})"
    if not isinstance(data, dict):
        return None, fenced, f"expected a JSON object, got {type(data).__name__}"
    if not isinstance(data.get("claim_checks"), list):
        return None, fenced, "the object has no claim_checks array"
    if data.get("verdict") not in VERDICTS:
        return None, fenced, "verdict must be one of PASS, LOW_CONFID, REJECT"
    return data, fenced, None


def _ids(value: JSONValue) -> list[str]:
    values = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    return [item.strip() for item in values if isinstance(item, str) and item.strip()]


def _citations(raw: JSONValue, claim_id: str, notes: list[str]) -> list[RawCitation]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        notes.append(f"{claim_id}: evidence_refs is not a list, ignored")
        return []
    citations: list[RawCitation] = []
    for item in raw:
        if not isinstance(item, dict):
            notes.append(f"{claim_id}: evidence ref {short(item)} is not an object, dropped")
            continue
        trace_ref = item.get("trace_ref")
        if not isinstance(trace_ref, str) or not trace_ref.strip():
            notes.append(f"{claim_id}: evidence ref {short(item)} names no trace item, dropped")
            continue
        ids = _ids(item.get("source_invocation_ids")) + _ids(item.get("source_invocation_id"))
        citations.append(RawCitation(trace_ref=trace_ref.strip(), source_invocation_ids=ids))
    return citations


def _checks(raw: JSONValue, notes: list[str]) -> list[ProposedCheck] | None:
    if raw is None:
        return None
    if not isinstance(raw, list):
        notes.append("claim_checks is not a list, ignored")
        return None
    checks: list[ProposedCheck] = []
    for position, item in enumerate(raw):
        if not isinstance(item, dict):
            notes.append(f"claim_checks[{position}] is not an object, dropped")
            continue
        raw_id = item.get("claim_id")
        claim_id = normalize_id(raw_id) if isinstance(raw_id, str) else ""
        if not claim_id:
            notes.append(
                f"claim_checks[{position}] names no executor claim ({short(raw_id)}), dropped"
            )
            continue
        label, detail = item.get("verification"), item.get("detail")
        checks.append(
            ProposedCheck(
                claim_id=claim_id,
                verification=label if isinstance(label, str) else None,
                detail=detail.strip() if isinstance(detail, str) else "",
                evidence_refs=_citations(item.get("evidence_refs"), claim_id, notes),
            )
        )
    return checks


def _texts(value: JSONValue) -> list[str]:
    items = value if isinstance(value, list) else []
    texts = [one_line(item) for item in items if isinstance(item, str)]
    return list(dict.fromkeys(text for text in texts if text))


def read_coverage(raw: JSONValue, notes: list[str]) -> CoverageReport | None:
    """The reply's ``question_coverage``, or None when it has none or it is unreadable.

    ``{status: answered|partial|unanswered, asked: [...], unanswered: [...]}``; non-string
    facets are dropped, and an ``answered`` status that lists unanswered facets reads as
    ``partial``.
    """
    if raw is None:
        return None
    if not isinstance(raw, dict):
        notes.append("question_coverage is not an object, ignored")
        return None
    status = next((s for s in COVERAGE_STATUSES if s == raw.get("status")), None)
    if status is None:
        notes.append(f"question_coverage status {short(raw.get('status'))} is not known, ignored")
        return None
    unanswered = _texts(raw.get("unanswered"))
    if status == "answered" and unanswered:
        notes.append("question_coverage says answered but lists unanswered facets: partial")
        status = "partial"
    return CoverageReport(status=status, asked=_texts(raw.get("asked")), unanswered=unanswered)


def read_verifier_reply(raw: object) -> VerifierReply:
    """Read a Verifier reply object (or garbage) into a ``VerifierReply``; never raises."""
    notes: list[str] = []
    if raw is not None and not isinstance(raw, dict):
        notes.append("verifier output is not an object, ignored")
    data: JSONObject = raw if isinstance(raw, dict) else {}
    stated = data.get("verdict")
    verdict = next((v for v in VERDICTS if v == stated), None)
    if "verdict" in data and verdict is None:
        notes.append(f"verifier verdict {short(stated)} is not a known verdict, ignored")
    score = data.get("groundedness_score")
    rationale = data.get("rationale")
    return VerifierReply(
        verdict=verdict,
        groundedness_score=float(score)
        if isinstance(score, int | float) and not isinstance(score, bool)
        else None,
        claim_checks=_checks(data.get("claim_checks"), notes),
        rationale=rationale.strip() if isinstance(rationale, str) else "",
        notes=notes,
        question_coverage=read_coverage(data.get("question_coverage"), notes),
    )
