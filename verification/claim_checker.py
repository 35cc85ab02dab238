"""Deterministic claim checker: labels executor claims without a language model.

It compares the concrete tokens of each claim (numbers, percentages, durations, status and error
codes, exception names, service names) with the full texts of the claim's Gatekeeper-verified
evidence refs. It is used when the Verifier model's output cannot be parsed (the verdict is then
capped at LOW_CONFID by `verification.verdict.finalize`) and as the designated verifier in
offline mode.
Its output has the shape of the Verifier model's raw output, with verdict and score computed by
`verification.verdict`, so they always agree with the code-side arithmetic.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from verification.verdict import (
    claim_text,
    claims_with_ids,
    derive_verdict,
    facts_from_checks,
    groundedness_score,
    normalize_claim_checks,
    verified_excerpts_for,
)

KNOWLEDGE_TOOL = "lookup_knowledge"
"""Tool whose results (runbooks, past cases) are never evidence about the current incident."""

INFERENTIAL_TYPES: tuple[str, ...] = ("correlation", "causal", "state")
"""Claim types that evidence can at most support as an inference."""

# A run of these characters containing a digit is a concrete specific (as the Gatekeeper reads it).
_SPECIFIC_RUN = re.compile(r"[A-Za-z0-9._%:/-]+")
_EDGE_PUNCT = ".:/-"
_TIME_RANGE = re.compile(r"^(\d{1,2}:\d{2}(?::\d{2})?)-(\d{1,2}:\d{2}(?::\d{2})?)$")
_EXCEPTION = re.compile(
    r"(?<![A-Za-z0-9_])[A-Za-z_][A-Za-z0-9_]*(?:Exception|Error)(?![A-Za-z0-9_])"
)
_SERVICE = re.compile(r"(?<![a-z0-9-])[a-z0-9]+(?:-[a-z0-9]+)*-service(?![a-z0-9])")
_WORD = re.compile(r"[a-z0-9]+")
_ZERO_MATCH = re.compile(r"\bmatched 0 of 0\b")

_STOPWORDS = frozenset(
    "the and for with from was were are has have had this that these those been being into its "
    "there their than then also which while when where who what all any per".split()
)
_NEGATIONS = frozenset({"no", "not", "none", "never", "without", "zero"})
_CJK_NEGATIONS = ("没有", "无", "未", "不")
_MIN_WORD = 3
_OVERLAP = 0.5


def _norm(text: str) -> str:
    """NFKC-normalise (full-width to half-width) and lower-case."""
    return unicodedata.normalize("NFKC", text).lower()


def _specific_tokens(text: str) -> list[str]:
    """Extract numbers, percentages, durations and codes (runs of specific chars with a digit)."""
    tokens: list[str] = []
    for match in _SPECIFIC_RUN.finditer(text):
        token = match.group(0).strip(_EDGE_PUNCT)
        if any(ch.isdigit() for ch in token):
            tokens.append(token)
    return tokens


def extract_tokens(text: str, known_services: list[str] | None = None) -> list[str]:
    """Extract the concrete tokens of a claim text.

    Tokens: maximal runs of `[A-Za-z0-9._%:/-]` containing a digit (numbers, percentages,
    durations, HTTP status and error codes, timestamps; edge punctuation stripped), identifiers
    ending in `Exception`/`Error`, names of `known_services` occurring as whole tokens, and any
    `<name>-service` token. Matching is case-insensitive; full-width characters are read as their
    half-width forms.

    Args:
        text: The claim text.
        known_services: Service names known to the deployment.

    Returns:
        The distinct tokens, lower-cased, in order of first appearance.
    """
    if not isinstance(text, str):
        return []
    nfkc = unicodedata.normalize("NFKC", text)
    lowered = nfkc.lower()
    found: list[str] = []
    found.extend(_specific_tokens(nfkc))
    found.extend(m.group(0) for m in _EXCEPTION.finditer(nfkc))
    for service in known_services or []:
        if not isinstance(service, str) or not service.strip():
            continue
        name = _norm(service.strip())
        pattern = r"(?<![a-z0-9-])" + re.escape(name) + r"(?![a-z0-9])"
        if re.search(pattern, lowered):
            found.append(name)
    found.extend(m.group(0) for m in _SERVICE.finditer(lowered))
    tokens: list[str] = []
    for token in found:
        low = token.lower()
        if low and low not in tokens:
            tokens.append(low)
    return tokens


def _edge_ok(token_char: str, neighbour: str, beyond: str) -> bool:
    """Whether a neighbouring char ends the token (a digit must not continue a number)."""
    if not neighbour:
        return True
    if token_char.isdigit():
        if neighbour.isdigit():
            return False
        return not (neighbour == "." and beyond.isdigit())
    if token_char.isalpha():
        return not neighbour.isalpha()
    return True


def _occurs(token: str, text: str) -> bool:
    """Whether the (lower-cased) token occurs in the (lower-cased) text as a whole value.

    A token ending (or starting) in a digit must not be part of a longer number: `5` does not
    occur in `500` or `0.5`; a token ending in a letter must not run into more letters.
    """
    start = text.find(token)
    while start != -1:
        end = start + len(token)
        before = text[start - 1] if start > 0 else ""
        before2 = text[start - 2] if start > 1 else ""
        after = text[end] if end < len(text) else ""
        after2 = text[end + 1] if end + 1 < len(text) else ""
        if _edge_ok(token[0], before, before2) and _edge_ok(token[-1], after, after2):
            return True
        start = text.find(token, start + 1)
    return False


def _token_present(token: str, text: str) -> bool:
    """Whether a token is stated in the text; a time range counts when both ends are."""
    if _occurs(token, text):
        return True
    range_match = _TIME_RANGE.match(token)
    if range_match:
        return _occurs(range_match.group(1), text) and _occurs(range_match.group(2), text)
    return False


def _looks_negative(text: str) -> bool:
    """Whether a claim text states an absence (English or Chinese negation)."""
    lowered = _norm(text)
    if set(_WORD.findall(lowered)) & _NEGATIONS:
        return True
    return any(marker in lowered for marker in _CJK_NEGATIONS)


def _word_overlap(claim: str, evidence: str) -> float:
    """Share of the claim's ASCII words (>= 3 chars, no stopwords) found in the evidence text."""
    words = [w for w in _WORD.findall(_norm(claim)) if len(w) >= _MIN_WORD and w not in _STOPWORDS]
    if not words:
        return 0.0
    present = sum(1 for w in words if w in evidence)
    return present / len(words)


def _binding(claim: dict[str, Any], index: Any) -> dict[str, Any]:
    """Return the claim's binding at `index`, or an empty dict."""
    bindings = claim.get("evidence_bindings")
    if isinstance(index, int) and isinstance(bindings, list) and 0 <= index < len(bindings):
        found = bindings[index]
        if isinstance(found, dict):
            return found
    return {}


def _excerpt_tool(excerpt: dict[str, Any], claim: dict[str, Any]) -> str:
    """The tool of a verified excerpt (from the excerpt, else from its binding)."""
    tool = excerpt.get("tool_name")
    if not isinstance(tool, str) or not tool:
        tool = _binding(claim, excerpt.get("binding")).get("tool_name")
    return tool if isinstance(tool, str) else ""


def _excerpt_invocation(excerpt: dict[str, Any], claim: dict[str, Any]) -> str | None:
    """The invocation id of a verified excerpt (from the excerpt, else from its binding)."""
    inv = excerpt.get("invocation_id")
    if isinstance(inv, str) and inv:
        return inv
    binding = _binding(claim, excerpt.get("binding"))
    single = binding.get("source_invocation_id")
    if isinstance(single, str) and single:
        return single
    plural = binding.get("source_invocation_ids")
    if isinstance(plural, list) and len(plural) == 1 and isinstance(plural[0], str):
        return plural[0]
    return None


def _refs_for(invocation_ids: list[str], trace_summary: Any) -> list[dict[str, Any]]:
    """Trace items containing any of the invocation ids, as evidence refs."""
    refs: list[dict[str, Any]] = []
    if not isinstance(trace_summary, list):
        return refs
    for item in trace_summary:
        if not isinstance(item, dict) or not isinstance(item.get("trace_ref"), str):
            continue
        item_ids = item.get("source_invocation_ids")
        if not isinstance(item_ids, list):
            continue
        shared = [i for i in item_ids if isinstance(i, str) and i in invocation_ids]
        if shared:
            tool = item.get("tool_name")
            refs.append(
                {
                    "trace_ref": item["trace_ref"],
                    "tool_name": tool if isinstance(tool, str) else "",
                    "source_invocation_ids": shared,
                }
            )
    return refs


def _label_claim(
    claim: dict[str, Any], verified: list[dict[str, Any]], known_services: list[str] | None
) -> tuple[str, str]:
    """Label one claim from its verified excerpts; returns `(label, detail)`."""
    if not verified:
        return "unsupported", "no Gatekeeper-verified evidence binding"
    incident = [e for e in verified if _excerpt_tool(e, claim) != KNOWLEDGE_TOOL]
    if not incident:
        return (
            "external_unknown",
            "verified evidence is knowledge only (runbook or past case), "
            "not evidence about this incident",
        )
    text = claim_text(claim)
    claim_type = claim.get("claim_type")
    support_level = claim.get("support_level")
    evidence = "\n".join(_norm(e["text"]) for e in incident)
    zero_match = [
        e
        for e in incident
        if e.get("raw_path") == "summary" and _ZERO_MATCH.search(_norm(e["text"]))
    ]
    negative = claim_type == "negative_observation" or (
        len(zero_match) == len(incident) and _looks_negative(text)
    )
    if not negative and len(zero_match) == len(incident):
        return "unsupported", "the only verified evidence is a query that matched nothing"

    tokens = extract_tokens(text, known_services)
    label: str
    if tokens:
        found = [t for t in tokens if _token_present(t, evidence)]
        missing = [t for t in tokens if t not in found]
        detail = f"found in verified evidence: {', '.join(found) or 'none'}"
        if missing:
            detail += f"; missing: {', '.join(missing)}"
        if not missing:
            label = "direct_observation"
        elif found:
            label = "overstated"
        else:
            label = "unsupported"
    elif claim_type in INFERENTIAL_TYPES:
        label, detail = "reasonable_inference", "no concrete tokens to compare"
    elif negative and zero_match:
        label, detail = "direct_observation", "no concrete tokens; the query matched nothing"
    else:
        overlap = _word_overlap(text, evidence)
        detail = f"no concrete tokens; word overlap with verified evidence {overlap:.0%}"
        negation_lost = _looks_negative(text) and not _looks_negative(evidence)
        if support_level == "direct" and overlap >= _OVERLAP and not negation_lost:
            label = "direct_observation"
        else:
            label = "reasonable_inference"

    if label == "direct_observation":
        if claim_type in INFERENTIAL_TYPES:
            label = "reasonable_inference"
            detail += f"; a {claim_type} claim is at most an inference"
        elif support_level != "direct":
            label = "reasonable_inference"
            detail += "; the executor marked its support as indirect"
        elif negative and not zero_match:
            label = "reasonable_inference"
            detail += "; an absence is only observed directly by a query that matched nothing"
    return label, detail


def check_claims(
    structured_output: dict[str, Any] | None,
    gatekeeper_result: dict[str, Any],
    trace_summary: list[dict[str, Any]],
    *,
    known_services: list[str] | None = None,
) -> dict[str, Any]:
    """Check every executor claim deterministically against its Gatekeeper-verified evidence.

    Per claim: no verified binding -> `unsupported`; only knowledge (`lookup_knowledge`) bindings
    verified -> `external_unknown`; otherwise the claim's concrete tokens are compared with the
    verified ref texts of its incident evidence: all present -> `direct_observation` (at most
    `reasonable_inference` for correlation/causal/state claims, for indirect support, and for a
    negative observation not bound to a query that matched nothing), some -> `overstated`, none
    -> `unsupported`. A claim with no tokens is `direct_observation` only when it is a direct
    observation whose words largely appear in the evidence (or a negative observation bound to a
    `matched 0 of 0` summary), else `reasonable_inference`. A positive claim whose only incident
    evidence is a query that matched nothing is `unsupported`.

    Args:
        structured_output: The executor's structured output (may be None or garbage).
        gatekeeper_result: The Gatekeeper result with `verified_excerpts`.
        trace_summary: The tool trace summary items.
        known_services: Service names known to the deployment (counted as tokens).

    Returns:
        A Verifier-shaped object `{verdict, groundedness_score, critical_fact_count,
        claim_checks, rationale}`; each check is `{claim_id, verification, detail,
        evidence_refs}`.
    """
    raw_checks: list[dict[str, Any]] = []
    for claim_id, claim in claims_with_ids(structured_output):
        verified = verified_excerpts_for(gatekeeper_result, claim_id)
        label, detail = _label_claim(claim, verified, known_services)
        invocation_ids = [
            inv for inv in (_excerpt_invocation(e, claim) for e in verified) if inv is not None
        ]
        raw_checks.append(
            {
                "claim_id": claim_id,
                "verification": label,
                "detail": detail,
                "evidence_refs": _refs_for(invocation_ids, trace_summary),
            }
        )
    checks, _notes = normalize_claim_checks(
        raw_checks, structured_output, gatekeeper_result, trace_summary
    )
    score = groundedness_score(facts_from_checks(checks, structured_output))
    verdict = derive_verdict(checks, score, gatekeeper_result)
    counts: dict[str, int] = {}
    for check in checks:
        counts[check["verification"]] = counts.get(check["verification"], 0) + 1
    if checks:
        summary = ", ".join(f"{n} {label}" for label, n in counts.items())
        rationale = f"Deterministic claim check of {len(checks)} claim(s): {summary}."
    else:
        rationale = "Deterministic claim check: there are no executor claims to check."
    return {
        "verdict": verdict,
        "groundedness_score": score,
        "critical_fact_count": len(checks),
        "claim_checks": [
            {key: check[key] for key in ("claim_id", "verification", "detail", "evidence_refs")}
            for check in checks
        ],
        "rationale": rationale,
    }
