"""Deterministic evidence score persisted as ``self_evaluation.rule_evaluation`` (contracts §7)."""

from __future__ import annotations

from typing import Any

FORMULA_VERSION = "rule-eval.v1"
"""Version of the scoring formula below; persisted with every result."""

EVIDENCE_TOOLS: frozenset[str] = frozenset({"query_logs", "query_metrics", "lookup_knowledge"})
"""Tools whose calls count as evidence calls."""

WEIGHT_VERIFIED_CLAIMS = 0.5
WEIGHT_VALID_BINDINGS = 0.3
WEIGHT_OK_CALLS = 0.2


def _ratio(part: int, whole: int) -> float:
    return part / whole if whole > 0 else 0.0


def _claims(structured_output: dict[str, Any] | None) -> list[Any]:
    if not isinstance(structured_output, dict):
        return []
    claims = structured_output.get("claims")
    return claims if isinstance(claims, list) else []


def _cited_refs(claims: list[Any]) -> set[tuple[str, str]]:
    """(invocation_id, raw_path) pairs the claims' bindings name precisely."""
    cited: set[tuple[str, str]] = set()
    for claim in claims:
        if not isinstance(claim, dict) or not isinstance(claim.get("evidence_bindings"), list):
            continue
        for binding in claim["evidence_bindings"]:
            if not isinstance(binding, dict):
                continue
            raw_path = binding.get("raw_path")
            invocation_id = binding.get("source_invocation_id")
            plural = binding.get("source_invocation_ids")
            if not invocation_id and isinstance(plural, list) and len(plural) == 1:
                invocation_id = plural[0]
            if isinstance(invocation_id, str) and invocation_id and isinstance(raw_path, str):
                if raw_path.strip():
                    cited.add((invocation_id.strip(), raw_path.strip()))
    return cited


def evaluate_rules(
    invocations: list[dict[str, Any]],
    structured_output: dict[str, Any] | None,
    gatekeeper_result: dict[str, Any],
) -> dict[str, Any]:
    """Compute the deterministic evidence score of one diagnosis round.

    Formula ``rule-eval.v1``::

        score = 0.5 * verified_claim_fraction
              + 0.3 * bindings_valid / bindings_checked      (0 when no binding was checked)
              + 0.2 * evidence_calls.ok / evidence calls    (0 when no evidence call was made)

    The score is 0.0 when the structured output has no claims, and is rounded to 4 decimals.
    ``verified_claim_fraction`` is the share of claims with at least one Gatekeeper-verified
    binding; ``bindings_valid`` counts verified bindings; ``distinct_refs_cited`` counts distinct
    ``(invocation_id, raw_path)`` pairs the claims cite (including ids the Gatekeeper backfilled),
    whether or not they verified.

    Args:
        invocations: Every invocation row of the diagnosis (helpers are not counted).
        structured_output: The executor's parsed object, or ``None``.
        gatekeeper_result: The result of ``run_gatekeeper`` for this output.

    Returns:
        ``{"formula_version", "evidence_calls": {"ok", "no_hit", "error"}, "claim_count",
        "verified_claims", "verified_claim_fraction", "distinct_refs_cited", "bindings_checked",
        "bindings_valid", "score"}``.
    """
    calls = {"ok": 0, "no_hit": 0, "error": 0}
    for invocation in invocations:
        if not isinstance(invocation, dict):
            continue
        tool_name = invocation.get("tool_name")
        if not isinstance(tool_name, str) or tool_name not in EVIDENCE_TOOLS:
            continue
        status = invocation.get("status")
        if isinstance(status, str) and status in calls:
            calls[status] += 1

    claims = _claims(structured_output)
    if not isinstance(gatekeeper_result, dict):
        gatekeeper_result = {}
    verified_excerpts = gatekeeper_result.get("verified_excerpts")
    if not isinstance(verified_excerpts, dict):
        verified_excerpts = {}
    verified_entries = [
        entry
        for entries in verified_excerpts.values()
        if isinstance(entries, list)
        for entry in entries
        if isinstance(entry, dict)
    ]
    claim_ids = {
        claim.get("claim_id")
        for claim in claims
        if isinstance(claim, dict) and isinstance(claim.get("claim_id"), str)
    }
    verified_claims = sum(
        1
        for claim_id, entries in verified_excerpts.items()
        if claim_id in claim_ids and isinstance(entries, list) and entries
    )

    cited = _cited_refs(claims)
    for entry in verified_entries:
        invocation_id, raw_path = entry.get("invocation_id"), entry.get("raw_path")
        if isinstance(invocation_id, str) and isinstance(raw_path, str):
            cited.add((invocation_id, raw_path))

    checked = gatekeeper_result.get("checked_bindings")
    bindings_checked = checked if isinstance(checked, int) and checked >= 0 else 0
    bindings_valid = min(len(verified_entries), bindings_checked)
    claim_count = len(claims)
    fraction = min(_ratio(verified_claims, claim_count), 1.0)
    evidence_calls = sum(calls.values())
    if claim_count == 0:
        score = 0.0
    else:
        score = (
            WEIGHT_VERIFIED_CLAIMS * fraction
            + WEIGHT_VALID_BINDINGS * _ratio(bindings_valid, bindings_checked)
            + WEIGHT_OK_CALLS * _ratio(calls["ok"], evidence_calls)
        )
    return {
        "formula_version": FORMULA_VERSION,
        "evidence_calls": calls,
        "claim_count": claim_count,
        "verified_claims": verified_claims,
        "verified_claim_fraction": round(fraction, 4),
        "distinct_refs_cited": len(cited),
        "bindings_checked": bindings_checked,
        "bindings_valid": bindings_valid,
        "score": round(min(max(score, 0.0), 1.0), 4),
    }
