"""Deterministic claim checker: labels executor claims without a language model.

It compares what each claim states concretely (its specifics, plus service names) with the full
texts of the claim's Gatekeeper-verified incident evidence, through the shared text rules of
``verification.text``. It stands in for the Verifier when the model's reply cannot be parsed
(the verdict is then capped at LOW_CONFID) and is the designated verifier in offline mode. Its
reply has the shape of the model's; ``verification.verdict.decide`` turns it into the decision.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from state.display import strip_invisible
from state.records import (
    Claim,
    ClaimLabel,
    ExecutorAnswer,
    GatekeeperResult,
    ProposedCheck,
    RawCitation,
    TraceItem,
    VerifiedExcerpt,
    VerifierReply,
)
from tools.registry import is_guidance
from verification.gatekeeper import verified_excerpts_of
from verification.polarity import (
    asserted_text,
    asserted_words,
    denied_at,
    denies,
    head_terms,
    key_terms,
    normalized,
    same_denial,
    scopes,
    states_term,
)
from verification.text import grounded, normalize, specifics
from verification.verdict import claim_checks, derive_verdict, facts_of, groundedness_score

INFERENTIAL_TYPES: Final[tuple[str, ...]] = ("correlation", "causal", "state")
"""Claim types that evidence can at most support as an inference."""

_SERVICE = re.compile(r"(?<![a-z0-9-])[a-z0-9]+(?:-[a-z0-9]+)*-service(?![a-z0-9])")
_WORD = re.compile(r"[a-z0-9]+")
_ZERO_MATCH = re.compile(r"\bmatched 0 of 0\b")
_ZERO_ALERTS = re.compile(r"\balerts 0 of 0\b")
_ZERO_SERIES = re.compile(r"\bseries 0 of 0\b")
_ALERT_WORDS = ("alert", "firing", "告警", "报警")
_SERIES_WORDS = ("series", "metric", "指标")
_STOPWORDS = frozenset(
    "the and for with from was were are has have had this that these those been being into its "
    "there their than then also which while when where who what all any per".split()
)
_MIN_WORD = 3
_OVERLAP = 0.5

# States that exclude each other: a claim stating one where its evidence states only the other
# is contradicted. Terms are separated by commas; an English term of several words is matched as
# a phrase. A term inside a negation's scope states the other side (``no longer firing``,
# ``不再触发``: resolved). Chinese terms have their own pairs, but for alert states
# (``异常`` is any error, not only "down", so it is never weighed against English words such as
# "up"); an alert's state reads the same in both languages.
_OPPOSITE_STATES: tuple[tuple[frozenset[str], frozenset[str]], ...] = tuple(
    (frozenset(t.strip() for t in a.split(",")), frozenset(t.strip() for t in b.split(",")))
    for a, b in (
        (
            "firing, triggered, pending, 触发, 告警中, 正在告警",
            "resolved, inactive, cleared, 已恢复, 已解决",
        ),
        (
            "up, running, healthy, available, online",
            "down, stopped, unhealthy, unavailable, offline",
        ),
        ("success, succeeded, successful, succeeds, passed", "failure, failed, failing, fails"),
        ("present, exists", "absent, missing, not found"),
        ("enabled", "disabled"),
        ("open, opened", "closed"),
        ("正常, 运行中, 没有异常, 无异常, 未见异常, 没有宕机, 未宕机", "异常, 宕机"),
        ("成功", "失败"),
        ("存在", "缺失, 不存在"),
    )
)
# English "up" that states no state: a bound ("up to 3 times") or a rise ("latency went up").
_UP_NO_STATE = re.compile(
    r"\bup to\b|\b(?:went|goes|going|go|scaled?|scaling|spiked?|jumped|shot|ramped|rose|climbed"
    r"|set|picked|sped|speeding|ticked)\s+up\b"
)


def claim_tokens(text: str, known_services: Sequence[str] = ()) -> list[str]:
    """What a claim text states concretely, lower-cased, distinct, in order of appearance.

    Its specifics (``verification.text.specifics``), the ``known_services`` it names as whole
    tokens, and any ``<name>-service`` token.
    """
    lowered = normalize(text, collapse_whitespace=False)
    found = [token.casefold() for token in specifics(text)]
    for service in known_services:
        name = normalize(service)
        if name and re.search(r"(?<![a-z0-9-])" + re.escape(name) + r"(?![a-z0-9])", lowered):
            found.append(name)
    found.extend(match.group(0) for match in _SERVICE.finditer(lowered))
    return list(dict.fromkeys(token for token in found if token))


def _looks_negative(text: str) -> bool:
    """Whether a text states an absence (a negation, ``verification.polarity``)."""
    return denies(text)


def _word_overlap(claim: str, evidence: str) -> float:
    """Share of the claim's ASCII words (>= 3 chars, no stopwords) found in the evidence text."""
    words = [
        word
        for word in _WORD.findall(normalize(claim))
        if len(word) >= _MIN_WORD and word not in _STOPWORDS
    ]
    if not words:
        return 0.0
    return sum(1 for word in words if word in evidence) / len(words)


def _state_occurs(term: str, plain: str, text: str, *, denied: bool) -> bool:
    """Whether ``term`` occurs in ``plain`` denied (in a negation's scope) or not, as asked.

    ``plain`` is ``text`` (normalised) with the phrases that state no state blanked out, offsets
    kept. A term that begins with a negation itself (``not found``, ``不存在``, ``没有异常``) is
    stated as it is; an English term is matched as a whole word or phrase.
    """
    if term.isascii():
        pattern = rf"(?<![a-z0-9]){re.escape(term)}(?![a-z0-9])"
        starts = [match.start() for match in re.finditer(pattern, plain)]
    else:
        starts = [match.start() for match in re.finditer(re.escape(term), plain)]
    own_negation = denies(term)
    return any((not own_negation and denied_at(text, start)) == denied for start in starts)


def _states(text: str, plain: str, side: frozenset[str], other: frozenset[str]) -> bool:
    """Whether a text states ``side``.

    One of its terms outside a negation, or one of the opposite side's terms denied (``no longer
    firing`` states ``resolved``).
    """
    return any(_state_occurs(term, plain, text, denied=False) for term in side) or any(
        _state_occurs(term, plain, text, denied=True) for term in other
    )


def _blank_no_state(text: str) -> str:
    return _UP_NO_STATE.sub(lambda match: " " * len(match.group()), text)


def _opposite_state(claim: str, evidence: str) -> bool:
    claim_plain, evidence_plain = _blank_no_state(claim), _blank_no_state(evidence)
    for side, other in _OPPOSITE_STATES:
        for stated, opposite in ((side, other), (other, side)):
            if (
                _states(claim, claim_plain, stated, opposite)
                and _states(evidence, evidence_plain, opposite, stated)
                and not _states(evidence, evidence_plain, stated, opposite)
            ):
                return True
    return False


def _denies_shown(claim_text: str, incident: Sequence[VerifiedExcerpt]) -> str | None:
    """Why the claim denies what a log line or alert shows, or None.

    A denied clause of the claim is contradicted when one asserting evidence text (not a query
    summary) states all of its key terms outside its own negations, unless some evidence text
    denies the same thing (the claim then quotes or restates that negation).
    """
    asserting = [
        asserted_text(entry["text"]) for entry in incident if entry["raw_path"] != "summary"
    ]
    for scope in scopes(claim_text):
        keys = key_terms(scope.body)
        if not keys or any(same_denial(scope, entry["text"]) for entry in incident):
            continue
        for text in asserting:
            if all(states_term(key, text) for key in keys):
                denied = f"{scope.cue} {scope.body.strip()}"
                return f"the claim says {denied!r}; the evidence shows {', '.join(keys)}"
    return None


def contradiction(claim_text: str, incident: Sequence[VerifiedExcerpt]) -> str | None:
    """Why the verified incident evidence states the opposite of the claim, or None.

    A state against its opposite (firing / resolved, up / down, succeeded / failed, present /
    absent, enabled / disabled, open / closed), a denied state reading as its opposite (``no
    longer firing`` is ``resolved``); or a polarity flip, each negation read with its whole scope
    (``verification.polarity``): the claim states what the evidence says did not happen (``hit
    a timeout`` against ``no timeout``), or the claim denies what a log line or alert shows
    (``never returned HTTP 500`` against a line with ``HTTP 500``). A claim that quotes or
    restates a negation of its evidence (``No contacts according to contactsId``) states what
    the evidence states.
    """
    claim = normalized(claim_text)
    evidence = "\n".join(normalized(entry["text"]) for entry in incident)
    if _opposite_state(claim, evidence):
        return "the evidence states the opposite state"
    claim_words = {word for word in asserted_words(claim_text) if len(word) > _MIN_WORD}
    heads: set[str] = set()
    stated: set[str] = set()
    for entry in incident:
        heads |= head_terms(entry["text"])
        stated |= asserted_words(entry["text"])
    for word in sorted(claim_words & heads - stated):
        return f"the evidence says there was no {word}"
    return _denies_shown(claim_text, incident)


def _matched_nothing(summary: str, claim_text: str) -> bool:
    """Whether a ``summary`` ref says the query matched nothing the claim speaks of.

    ``matched 0 of 0``; for ``query_metrics`` (``alerts <a> of <ta>, series <s> of <ts>``) both
    counts zero, or no alert at all for a claim that speaks of alerts and not of series.
    """
    text = normalize(summary)
    if _ZERO_MATCH.search(text):
        return True
    if not _ZERO_ALERTS.search(text):
        return False
    if _ZERO_SERIES.search(text):
        return True
    claim = normalize(claim_text)
    return any(w in claim for w in _ALERT_WORDS) and not any(w in claim for w in _SERIES_WORDS)


def _label_claim(
    claim: Claim, verified: Sequence[VerifiedExcerpt], known_services: Sequence[str]
) -> tuple[ClaimLabel, str]:
    """Label one claim from its verified excerpts; returns ``(label, detail)``."""
    if not verified:
        return "unsupported", "no Gatekeeper-verified evidence binding"
    incident = [entry for entry in verified if not is_guidance(entry["tool_name"])]
    if not incident:
        return (
            "external_unknown",
            "verified evidence is knowledge only (runbook or past case), "
            "not evidence about this incident",
        )
    text = strip_invisible(claim["claim_text"])
    reason = contradiction(text, incident)
    if reason is not None:
        return "contradicted", reason
    claim_type = claim["claim_type"]
    texts = [entry["text"] for entry in incident]
    evidence = "\n".join(normalize(t, collapse_whitespace=False) for t in texts)
    zero_match = [
        entry
        for entry in incident
        if entry["raw_path"] == "summary" and _matched_nothing(entry["text"], text)
    ]
    only_zero = len(zero_match) == len(incident)
    negative = claim_type == "negative_observation" or (only_zero and _looks_negative(text))
    if not negative and only_zero:
        return "unsupported", "the only verified evidence is a query that matched nothing"

    tokens = claim_tokens(text, known_services)
    label: ClaimLabel
    if tokens:
        found = [token for token in tokens if grounded(token, texts)]
        missing = [token for token in tokens if token not in found]
        detail = f"found in verified evidence: {', '.join(found) or 'none'}"
        if missing:
            detail += f"; missing: {', '.join(missing)}"
        label = "direct_observation" if not missing else "overstated" if found else "unsupported"
    elif claim_type in INFERENTIAL_TYPES:
        label, detail = "reasonable_inference", "no concrete tokens to compare"
    elif negative and zero_match:
        label, detail = "direct_observation", "no concrete tokens; the query matched nothing"
    else:
        overlap = _word_overlap(text, evidence)
        detail = f"no concrete tokens; word overlap with verified evidence {overlap:.0%}"
        negation_lost = _looks_negative(text) and not _looks_negative(evidence)
        direct = claim["support_level"] == "direct" and overlap >= _OVERLAP and not negation_lost
        label = "direct_observation" if direct else "reasonable_inference"

    if label == "direct_observation":
        if claim_type in INFERENTIAL_TYPES:
            label = "reasonable_inference"
            detail += f"; a {claim_type} claim is at most an inference"
        elif claim["support_level"] != "direct":
            label = "reasonable_inference"
            detail += "; the executor marked its support as indirect"
        elif negative and not zero_match:
            label = "reasonable_inference"
            detail += "; an absence is only observed directly by a query that matched nothing"
    return label, detail


def _citations(
    excerpts: Sequence[VerifiedExcerpt], trace: Sequence[TraceItem]
) -> list[RawCitation]:
    """The trace items holding the verified invocations, as citations."""
    invocation_ids = {entry["invocation_id"] for entry in excerpts}
    citations: list[RawCitation] = []
    for item in trace:
        shared = [i for i in item["source_invocation_ids"] if i in invocation_ids]
        if shared:
            citations.append(RawCitation(trace_ref=item["trace_ref"], source_invocation_ids=shared))
    return citations


def check_claims(
    answer: ExecutorAnswer,
    gatekeeper: GatekeeperResult,
    trace: Sequence[TraceItem],
    *,
    known_services: Sequence[str] = (),
) -> VerifierReply:
    """Check every claim deterministically against its Gatekeeper-verified evidence.

    Per claim: no verified binding -> ``unsupported``; knowledge only -> ``external_unknown``;
    otherwise its tokens are compared with the verified incident texts: all found ->
    ``direct_observation`` (at most ``reasonable_inference`` for correlation, causal and state
    claims, for indirect support, and for an absence not bound to a query that matched nothing),
    some -> ``overstated``, none -> ``unsupported``. A claim without tokens is a direct
    observation only when its words largely appear in the evidence (or it is a negative
    observation bound to a ``matched 0 of 0`` summary), else an inference. A positive claim whose
    only evidence is a query that matched nothing is ``unsupported``.

    Returns:
        A Verifier reply whose verdict and score follow from its checks.
    """
    proposed: list[ProposedCheck] = []
    for claim in answer["claims"]:
        verified = verified_excerpts_of(gatekeeper, claim["claim_id"])
        label, detail = _label_claim(claim, verified, known_services)
        proposed.append(
            ProposedCheck(
                claim_id=claim["claim_id"],
                verification=label,
                detail=detail,
                evidence_refs=_citations(verified, trace),
            )
        )
    checks = claim_checks(answer, proposed, gatekeeper, trace, [])
    score = groundedness_score(facts_of(checks, answer))
    counts: dict[str, int] = {}
    for check in checks:
        counts[check["verification"]] = counts.get(check["verification"], 0) + 1
    if checks:
        summary = ", ".join(f"{n} {label}" for label, n in counts.items())
        rationale = f"Deterministic claim check of {len(checks)} claim(s): {summary}."
    else:
        rationale = "Deterministic claim check: there are no executor claims to check."
    return VerifierReply(
        verdict=derive_verdict(checks, score, gatekeeper),
        groundedness_score=score,
        claim_checks=proposed,
        rationale=rationale,
        notes=[],
    )
