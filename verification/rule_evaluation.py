"""Deterministic evidence score persisted as ``self_evaluation.rule_evaluation``."""

from __future__ import annotations

from collections.abc import Sequence

from state.records import (
    EvidenceCallCounts,
    ExecutorAnswer,
    GatekeeperResult,
    Invocation,
    RuleEvaluation,
)
from tools.registry import is_evidence

FORMULA_VERSION = "rule-eval.v1"
"""Version of the scoring formula below; persisted with every result."""

WEIGHT_VERIFIED_CLAIMS = 0.5
WEIGHT_VALID_BINDINGS = 0.3
WEIGHT_OK_CALLS = 0.2


def _ratio(part: int, whole: int) -> float:
    return part / whole if whole > 0 else 0.0


def _cited_refs(answer: ExecutorAnswer) -> set[tuple[str, str]]:
    """(invocation_id, raw_path) pairs the claims' bindings name precisely."""
    cited: set[tuple[str, str]] = set()
    for claim in answer["claims"]:
        for binding in claim["evidence_bindings"]:
            invocation_id = binding["source_invocation_id"]
            plural = binding["source_invocation_ids"]
            if invocation_id is None and plural is not None and len(plural) == 1:
                invocation_id = plural[0]
            if invocation_id is not None and binding["raw_path"] is not None:
                cited.add((invocation_id.strip(), binding["raw_path"].strip()))
    return cited


def evaluate_rules(
    invocations: Sequence[Invocation], answer: ExecutorAnswer, gatekeeper: GatekeeperResult
) -> RuleEvaluation:
    """Compute the deterministic evidence score of one diagnosis round.

    Formula ``rule-eval.v1``::

        score = 0.5 * verified_claim_fraction
              + 0.3 * bindings_valid / bindings_checked      (0 when no binding was checked)
              + 0.2 * evidence_calls.ok / evidence calls    (0 when no evidence call was made)

    The score is 0.0 when there are no claims, and is rounded to 4 decimals.
    ``verified_claim_fraction`` is the share of claims with at least one Gatekeeper-verified
    binding; ``bindings_valid`` counts verified bindings; ``distinct_refs_cited`` counts distinct
    ``(invocation_id, raw_path)`` pairs the claims cite (including ids the Gatekeeper backfilled),
    whether or not they verified.
    """
    calls = EvidenceCallCounts(ok=0, no_hit=0, error=0)
    for invocation in invocations:
        if is_evidence(invocation["tool_name"]):
            calls[invocation["status"]] += 1
    claim_ids = {claim["claim_id"] for claim in answer["claims"] if claim["id_valid"]}
    verified = gatekeeper["verified_excerpts"]
    verified_claims = sum(1 for cid, found in verified.items() if cid in claim_ids and found)
    entries = [entry for found in verified.values() for entry in found]
    cited = _cited_refs(answer) | {(e["invocation_id"], e["raw_path"]) for e in entries}
    bindings_checked = max(gatekeeper["checked_bindings"], 0)
    bindings_valid = min(len(entries), bindings_checked)
    claim_count = len(answer["claims"])
    fraction = min(_ratio(verified_claims, claim_count), 1.0)
    score = (
        0.0
        if claim_count == 0
        else WEIGHT_VERIFIED_CLAIMS * fraction
        + WEIGHT_VALID_BINDINGS * _ratio(bindings_valid, bindings_checked)
        + WEIGHT_OK_CALLS * _ratio(calls["ok"], calls["ok"] + calls["no_hit"] + calls["error"])
    )
    return RuleEvaluation(
        formula_version=FORMULA_VERSION,
        evidence_calls=calls,
        claim_count=claim_count,
        verified_claims=verified_claims,
        verified_claim_fraction=round(fraction, 4),
        distinct_refs_cited=len(cited),
        bindings_checked=bindings_checked,
        bindings_valid=bindings_valid,
        score=round(min(max(score, 0.0), 1.0), 4),
    )
