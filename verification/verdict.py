"""Verdict arithmetic of the Verifier: claim checks, legacy facts, score and verdicts.

Everything here is deterministic code applied to the Verifier model's raw output (or to the
deterministic claim checker's output): the model proposes claim labels, the code decides which of
them stand, computes the groundedness score and the verdict. Inputs are plain dicts that may be
partial or garbage; nothing here raises on them.
"""

from __future__ import annotations

import math
from typing import Any

VERDICTS: tuple[str, ...] = ("PASS", "LOW_CONFID", "REJECT")
"""The three verdicts, loosest first."""

LABELS: tuple[str, ...] = (
    "direct_observation",
    "reasonable_inference",
    "overstated",
    "unsupported",
    "external_unknown",
    "contradicted",
)
"""The six claim verification labels."""

LEGACY_MAP: dict[str, str] = {
    "direct_observation": "direct_evidence",
    "reasonable_inference": "indirect_support",
    "overstated": "indirect_support",
    "unsupported": "no_evidence",
    "external_unknown": "no_evidence",
    "contradicted": "contradicted",
}
"""Claim label -> legacy `facts_checked` label."""

VALUES: dict[str, float] = {
    "direct_evidence": 1.0,
    "indirect_support": 0.6,
    "no_evidence": 0.0,
}
"""Score value of each legacy label (`contradicted` forces the score to 0.0)."""

MODES: tuple[str, ...] = ("model", "fallback", "offline")
"""How the raw Verifier output was produced (see `finalize`)."""

CONFIRMED_LABELS: tuple[str, ...] = ("direct_observation", "reasonable_inference")
"""Labels under which a claim may be presented as established."""

_VERDICT_RANK: dict[str, int] = {"REJECT": 0, "LOW_CONFID": 1, "PASS": 2}

# Strictness of the claim labels, strictest first (used to pick among duplicate checks).
_LABEL_RANK: dict[str, int] = {
    "contradicted": 0,
    "unsupported": 1,
    "external_unknown": 2,
    "overstated": 3,
    "reasonable_inference": 4,
    "direct_observation": 5,
}

_SEVERITY_CAP: dict[str, str | None] = {
    "none": None,
    "low_confid": "LOW_CONFID",
    "reject": "REJECT",
}

_MAX_NOTE_VALUE = 80


KNOWLEDGE_TOOL = "lookup_knowledge"
KNOWLEDGE_CAPPED = ("direct_observation", "reasonable_inference", "overstated")
"""Labels a claim bound only to knowledge documents cannot keep (it becomes external_unknown)."""


def _short(value: Any) -> str:
    """Render a value for a human-readable note, bounded."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) > _MAX_NOTE_VALUE:
        text = text[: _MAX_NOTE_VALUE - 1] + "…"
    return text


def _usable_id(value: Any) -> str | None:
    """Return the stripped id when it is a non-empty string, else None."""
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


def claims_with_ids(structured_output: Any) -> list[tuple[str, dict[str, Any]]]:
    """List the executor claims with the id each one is known by.

    A claim without a usable `claim_id` (missing, empty, not a string), or whose id repeats an
    earlier claim's id, is known by its position: `claims[<i>]`. A claim that is a bare string is
    read as a claim with that `claim_text`; any other non-dict claim as an empty claim.

    Args:
        structured_output: The executor's structured output (may be None or garbage).

    Returns:
        `(claim_id, claim)` pairs in claim order; empty when there are no readable claims.
    """
    if not isinstance(structured_output, dict):
        return []
    raw_claims = structured_output.get("claims")
    if not isinstance(raw_claims, list):
        return []
    result: list[tuple[str, dict[str, Any]]] = []
    seen: set[str] = set()
    for index, raw in enumerate(raw_claims):
        if isinstance(raw, dict):
            claim: dict[str, Any] = raw
        elif isinstance(raw, str):
            claim = {"claim_text": raw}
        else:
            claim = {}
        raw_id = claim.get("claim_id")
        # The id is kept exactly as written: the Gatekeeper keys verified excerpts by it.
        claim_id = raw_id if _usable_id(raw_id) is not None else None
        if claim_id is None or claim_id in seen:
            claim_id = f"claims[{index}]"
        seen.add(claim_id)
        result.append((claim_id, claim))
    return result


def claim_text(claim: Any) -> str:
    """Return a claim's `claim_text`, or an empty string when it has none.

    Args:
        claim: One executor claim (may be garbage).

    Returns:
        The claim text, stripped.
    """
    if isinstance(claim, dict):
        text = claim.get("claim_text")
        if isinstance(text, str):
            return text.strip()
    return ""


def verified_excerpts_for(gatekeeper_result: Any, claim_id: str) -> list[dict[str, Any]]:
    """Return the Gatekeeper-verified excerpts of one claim (only well-formed entries).

    Args:
        gatekeeper_result: The Gatekeeper result (may be garbage).
        claim_id: The claim's id.

    Returns:
        The entries of `verified_excerpts[claim_id]` that are dicts with a string `text`.
    """
    if not isinstance(gatekeeper_result, dict):
        return []
    excerpts = gatekeeper_result.get("verified_excerpts")
    if not isinstance(excerpts, dict):
        return []
    entries = excerpts.get(claim_id)
    if not isinstance(entries, list):
        return []
    return [e for e in entries if isinstance(e, dict) and isinstance(e.get("text"), str)]


def _normalize_label(value: Any) -> str | None:
    """Map a model label onto LABELS (case, spaces and hyphens tolerated), or None."""
    if not isinstance(value, str):
        return None
    key = value.strip().lower().replace("-", "_").replace(" ", "_")
    return key if key in _LABEL_RANK else None


def _trace_index(trace_summary: Any) -> dict[str, dict[str, Any]]:
    """Index the trace summary items by trace_ref."""
    index: dict[str, dict[str, Any]] = {}
    if not isinstance(trace_summary, list):
        return index
    for item in trace_summary:
        if isinstance(item, dict):
            ref = _usable_id(item.get("trace_ref"))
            if ref is not None and ref not in index:
                index[ref] = item
    return index


def _string_list(value: Any) -> list[str]:
    """Return the usable strings of a list (or of a single string)."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return []
    return [s for s in (_usable_id(v) for v in value) if s is not None]


def _clean_refs(
    raw_refs: Any, trace: dict[str, dict[str, Any]], claim_id: str, notes: list[str]
) -> list[dict[str, Any]]:
    """Keep the refs whose trace_ref exists; keep only invocation ids of that trace item."""
    if raw_refs is None:
        return []
    if not isinstance(raw_refs, list):
        notes.append(f"{claim_id}: evidence_refs is not a list, ignored")
        return []
    merged: dict[str, dict[str, Any]] = {}
    for raw in raw_refs:
        if not isinstance(raw, dict):
            notes.append(f"{claim_id}: evidence ref {_short(raw)} is not an object, dropped")
            continue
        trace_ref = _usable_id(raw.get("trace_ref"))
        if trace_ref is None or trace_ref not in trace:
            notes.append(f"{claim_id}: evidence ref {_short(raw)} names no trace item, dropped")
            continue
        item = trace[trace_ref]
        tool_name = item.get("tool_name")
        allowed = _string_list(item.get("source_invocation_ids"))
        wanted = _string_list(raw.get("source_invocation_ids")) + _string_list(
            raw.get("source_invocation_id")
        )
        ref = merged.setdefault(
            trace_ref,
            {
                "trace_ref": trace_ref,
                "tool_name": tool_name if isinstance(tool_name, str) else "",
                "source_invocation_ids": [],
            },
        )
        for inv in wanted:
            if inv not in allowed:
                notes.append(
                    f"{claim_id}: invocation id {_short(inv)} is not part of trace item "
                    f"{trace_ref}, dropped"
                )
            elif inv not in ref["source_invocation_ids"]:
                ref["source_invocation_ids"].append(inv)
    return list(merged.values())


def _index_checks(
    raw_checks: Any, claim_ids: list[str], notes: list[str]
) -> dict[str, dict[str, Any]]:
    """Index the model's checks by claim id, dropping those for unknown claims.

    Duplicate checks of one claim: the one with the strictest label is kept.
    """
    if raw_checks is None:
        return {}
    if not isinstance(raw_checks, list):
        notes.append("claim_checks is not a list, ignored")
        return {}
    known = {claim_id.strip(): claim_id for claim_id in claim_ids}
    checks: dict[str, dict[str, Any]] = {}
    for position, raw in enumerate(raw_checks):
        if not isinstance(raw, dict):
            notes.append(f"claim_checks[{position}] is not an object, dropped")
            continue
        check_id = _usable_id(raw.get("claim_id"))
        if check_id is None or check_id not in known:
            notes.append(
                f"claim_checks[{position}] names no executor claim "
                f"({_short(raw.get('claim_id'))}), dropped"
            )
            continue
        claim_id = known[check_id]
        if claim_id in checks:
            old = _LABEL_RANK.get(_normalize_label(checks[claim_id].get("verification")) or "", 1)
            new = _LABEL_RANK.get(_normalize_label(raw.get("verification")) or "", 1)
            notes.append(f"{claim_id}: checked more than once, the strictest check kept")
            if new < old:
                checks[claim_id] = raw
            continue
        checks[claim_id] = raw
    return checks


def _with_reason(detail: str, reason: str) -> str:
    """Append the code's reason for a changed label to the model's detail."""
    return f"{detail} [{reason}]" if detail else reason


def normalize_claim_checks(
    raw_checks: Any,
    structured_output: dict[str, Any] | None,
    gatekeeper_result: dict[str, Any],
    trace_summary: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[str]]:
    """Turn the model's claim checks into exactly one checked label per executor claim.

    Rules (contracts section 5): a claim the model did not check, or labelled with an unknown
    label, is `unsupported`; evidence refs are kept only when their `trace_ref` exists, with the
    invocation ids not belonging to that trace item dropped and `tool_name` taken from the trace
    item; a claim left without a valid ref cannot be `direct_observation`; a claim none of whose
    bindings the Gatekeeper verified is `unsupported` unless the model said `contradicted`.

    Args:
        raw_checks: The model's `claim_checks` (may be garbage).
        structured_output: The executor's structured output (its claims are the critical facts).
        gatekeeper_result: The Gatekeeper result (its `verified_excerpts` are read).
        trace_summary: The tool trace summary items.

    Returns:
        `(checks, notes)`: checks in claim order, each `{claim_id, verification, detail,
        evidence_refs, model_verification}`; notes are human-readable audit lines.
    """
    notes: list[str] = []
    claims = claims_with_ids(structured_output)
    trace = _trace_index(trace_summary)
    by_id = _index_checks(raw_checks, [cid for cid, _ in claims], notes)
    checks: list[dict[str, Any]] = []
    for claim_id, _claim in claims:
        raw = by_id.get(claim_id)
        if raw is None:
            notes.append(f"{claim_id}: not checked by the verifier -> unsupported")
            checks.append(
                {
                    "claim_id": claim_id,
                    "verification": "unsupported",
                    "detail": "not checked by the verifier",
                    "evidence_refs": [],
                    "model_verification": None,
                }
            )
            continue
        model_label = raw.get("verification")
        model_verification = model_label if isinstance(model_label, str) else None
        raw_detail = raw.get("detail")
        detail = raw_detail.strip() if isinstance(raw_detail, str) else ""
        label = _normalize_label(model_label)
        if label is None:
            notes.append(f"{claim_id}: unknown label {_short(model_label)} -> unsupported")
            label = "unsupported"
            detail = _with_reason(detail, f"unknown label {_short(model_label)}")
        refs = _clean_refs(raw.get("evidence_refs"), trace, claim_id, notes)
        if label == "direct_observation" and not refs:
            notes.append(
                f"{claim_id}: direct_observation without a valid evidence ref -> unsupported"
            )
            label = "unsupported"
            detail = _with_reason(detail, "no valid evidence ref")
        verified = verified_excerpts_for(gatekeeper_result, claim_id)
        if not verified and label != "contradicted":
            if label != "unsupported":
                notes.append(f"{claim_id}: no Gatekeeper-verified binding, {label} -> unsupported")
                detail = _with_reason(detail, "no Gatekeeper-verified evidence binding")
            label = "unsupported"
        elif (
            verified
            and all(item.get("tool_name") == KNOWLEDGE_TOOL for item in verified)
            and label in KNOWLEDGE_CAPPED
        ):
            # Runbooks and past cases are never evidence about the current incident.
            notes.append(f"{claim_id}: only knowledge evidence, {label} -> external_unknown")
            detail = _with_reason(detail, "bound only to knowledge documents")
            label = "external_unknown"
        checks.append(
            {
                "claim_id": claim_id,
                "verification": label,
                "detail": detail,
                "evidence_refs": refs,
                "model_verification": model_verification,
            }
        )
    return checks, notes


def facts_from_checks(
    checks: list[dict[str, Any]], structured_output: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """Derive the legacy `facts_checked` list from claim checks.

    Args:
        checks: Normalized claim checks (see `normalize_claim_checks`).
        structured_output: The executor's structured output (gives each claim's text).

    Returns:
        One `{fact, is_critical, verification, detail, evidence_refs}` per check, every fact
        critical; the legacy label comes from LEGACY_MAP (an unknown label maps to no_evidence).
    """
    texts = {cid: claim_text(claim) for cid, claim in claims_with_ids(structured_output)}
    facts: list[dict[str, Any]] = []
    for check in checks if isinstance(checks, list) else []:
        if not isinstance(check, dict):
            continue
        claim_id = check.get("claim_id")
        label = check.get("verification")
        refs = check.get("evidence_refs")
        facts.append(
            {
                "fact": texts.get(claim_id, "") if isinstance(claim_id, str) else "",
                "is_critical": True,
                "verification": LEGACY_MAP.get(label, "no_evidence")
                if isinstance(label, str)
                else "no_evidence",
                "detail": check.get("detail") if isinstance(check.get("detail"), str) else "",
                "evidence_refs": list(refs) if isinstance(refs, list) else [],
            }
        )
    return facts


def groundedness_score(facts: list[dict[str, Any]]) -> float:
    """Compute the groundedness score from legacy facts.

    0.0 when any critical fact is contradicted or there are no critical facts; otherwise the mean
    of VALUES over critical facts (unknown labels count 0.0), clamped to [0, 1] and rounded to 4
    places. A fact counts as critical unless `is_critical` is explicitly False.

    Args:
        facts: Legacy `facts_checked` items.

    Returns:
        The score.
    """
    critical = [
        f
        for f in (facts if isinstance(facts, list) else [])
        if isinstance(f, dict) and f.get("is_critical") is not False
    ]
    if not critical:
        return 0.0
    labels = [f.get("verification") for f in critical]
    if "contradicted" in labels:
        return 0.0
    total = sum(VALUES.get(label, 0.0) if isinstance(label, str) else 0.0 for label in labels)
    score = total / len(critical)
    if math.isnan(score):
        return 0.0
    return round(min(1.0, max(0.0, score)), 4)


def _gatekeeper_failed(gatekeeper_result: Any) -> bool:
    """True unless the Gatekeeper result states status pass or warn."""
    if not isinstance(gatekeeper_result, dict):
        return True
    return gatekeeper_result.get("status") not in ("pass", "warn")


def derive_verdict(
    checks: list[dict[str, Any]], score: float, gatekeeper_result: dict[str, Any]
) -> str:
    """Derive the verdict from the claim labels, the score and the Gatekeeper status.

    Any contradicted claim -> REJECT; PASS only if there is at least one claim, every claim is
    direct_observation or reasonable_inference, at least one is direct_observation, the Gatekeeper
    did not fail (a missing or unreadable status counts as failed) and score >= 0.5; else
    LOW_CONFID.

    Args:
        checks: Normalized claim checks.
        score: The groundedness score.
        gatekeeper_result: The Gatekeeper result.

    Returns:
        One of VERDICTS.
    """
    labels = (
        [c.get("verification") for c in checks if isinstance(c, dict)]
        if isinstance(checks, list)
        else []
    )
    if "contradicted" in labels:
        return "REJECT"
    if (
        labels
        and all(label in CONFIRMED_LABELS for label in labels)
        and "direct_observation" in labels
        and not _gatekeeper_failed(gatekeeper_result)
        and isinstance(score, int | float)
        and score >= 0.5
    ):
        return "PASS"
    return "LOW_CONFID"


def _strictest(verdicts: list[str]) -> str:
    """Return the strictest of the given verdicts (REJECT < LOW_CONFID < PASS)."""
    return min(verdicts, key=lambda v: _VERDICT_RANK[v])


def effective_verdict(
    *,
    model_verdict: str | None,
    derived_verdict: str,
    parse_status: dict[str, Any],
    gatekeeper_result: dict[str, Any],
    cap: str | None = None,
) -> str:
    """Compute the effective verdict: the strictest of every source.

    Sources: the model's verdict (None or not one of VERDICTS -> ignored), the derived verdict, the
    parse-status cap (status not `valid`, or no readable parse status -> LOW_CONFID), the
    Gatekeeper severity cap (`reject` -> REJECT, `low_confid` -> LOW_CONFID, `none` -> no cap, an
    unreadable severity -> LOW_CONFID) and an optional extra cap.

    Args:
        model_verdict: The verdict the Verifier model stated.
        derived_verdict: The verdict derived in code (see `derive_verdict`).
        parse_status: The executor output parse status.
        gatekeeper_result: The Gatekeeper result.
        cap: An extra upper bound (e.g. LOW_CONFID when the claim checker replaced the model).

    Returns:
        One of VERDICTS.
    """
    candidates = [derived_verdict if derived_verdict in _VERDICT_RANK else "LOW_CONFID"]
    if isinstance(model_verdict, str) and model_verdict in _VERDICT_RANK:
        candidates.append(model_verdict)
    if not isinstance(parse_status, dict) or parse_status.get("status") != "valid":
        candidates.append("LOW_CONFID")
    severity = gatekeeper_result.get("severity") if isinstance(gatekeeper_result, dict) else None
    if isinstance(severity, str) and severity in _SEVERITY_CAP:
        severity_cap = _SEVERITY_CAP[severity]
        if severity_cap is not None:
            candidates.append(severity_cap)
    else:
        candidates.append("LOW_CONFID")
    if cap is not None:
        candidates.append(cap if cap in _VERDICT_RANK else "LOW_CONFID")
    return _strictest(candidates)


def finalize(
    raw_output: dict[str, Any] | None,
    *,
    structured_output: dict[str, Any] | None,
    parse_status: dict[str, Any],
    gatekeeper_result: dict[str, Any],
    trace_summary: list[dict[str, Any]],
    mode: str,
) -> dict[str, Any]:
    """Turn a raw Verifier output into the verifier result the graph routes on and persists.

    Args:
        raw_output: The Verifier's JSON object (model output, or the claim checker's output).
        structured_output: The executor's structured output.
        parse_status: The executor output parse status.
        gatekeeper_result: The Gatekeeper result.
        trace_summary: The tool trace summary.
        mode: `model` (the model's output), `fallback` (the model's output could not be parsed and
            the deterministic claim checker replaced it: verdict capped at LOW_CONFID) or `offline`
            (the deterministic checker is the designated verifier: no extra cap).

    Returns:
        `{verdict, model_verdict, derived_verdict, groundedness_score, critical_fact_count,
        claim_checks, facts_checked, rationale, verifier_mode, notes}`; `verdict` is the effective
        verdict.

    Raises:
        ValueError: If `mode` is not one of MODES.
    """
    if mode not in MODES:
        raise ValueError(f"unknown verifier mode {mode!r}; expected one of {', '.join(MODES)}")
    raw = raw_output if isinstance(raw_output, dict) else {}
    notes: list[str] = []
    if raw_output is not None and not isinstance(raw_output, dict):
        notes.append("verifier output is not an object, ignored")
    stated = raw.get("verdict")
    model_verdict = stated if isinstance(stated, str) and stated in _VERDICT_RANK else None
    if "verdict" in raw and model_verdict is None:
        notes.append(f"verifier verdict {_short(stated)} is not a known verdict, ignored")
    checks, check_notes = normalize_claim_checks(
        raw.get("claim_checks"), structured_output, gatekeeper_result, trace_summary
    )
    notes.extend(check_notes)
    facts = facts_from_checks(checks, structured_output)
    score = groundedness_score(facts)
    stated_score = raw.get("groundedness_score")
    if (
        isinstance(stated_score, int | float)
        and not isinstance(stated_score, bool)
        and abs(float(stated_score) - score) > 0.001
    ):
        notes.append(f"verifier stated groundedness {stated_score}; computed {score} is used")
    derived = derive_verdict(checks, score, gatekeeper_result)
    cap = "LOW_CONFID" if mode == "fallback" else None
    if mode == "fallback":
        notes.append(
            "verifier output could not be parsed; deterministic claim checker used, "
            "verdict capped at LOW_CONFID"
        )
    verdict = effective_verdict(
        model_verdict=model_verdict,
        derived_verdict=derived,
        parse_status=parse_status,
        gatekeeper_result=gatekeeper_result,
        cap=cap,
    )
    rationale = raw.get("rationale")
    return {
        "verdict": verdict,
        "model_verdict": model_verdict,
        "derived_verdict": derived,
        "groundedness_score": score,
        "critical_fact_count": len(checks),
        "claim_checks": checks,
        "facts_checked": facts,
        "rationale": rationale.strip() if isinstance(rationale, str) else "",
        "verifier_mode": mode,
        "notes": notes,
    }
