"""The verdict, decided in one place: ``decide`` turns a Verifier reply into the round's decision.

The model (or the deterministic claim checker) only proposes a label per claim. Code decides
which labels stand, derives the legacy facts, computes the groundedness score and the verdicts:

1. **Labels.** Every executor claim gets exactly one check, in claim order. A claim the reply
   did not check, or labelled with an unknown label, is ``unsupported``. Citations are kept only
   when their ``trace_ref`` exists, with invocation ids not belonging to that trace item dropped;
   a ``direct_observation`` left without a citation is ``unsupported``. A claim none of whose
   bindings the Gatekeeper verified is ``unsupported`` (a stricter ``contradicted`` stands); one
   whose only verified evidence is knowledge is at most ``external_unknown``; one the Gatekeeper
   flagged with ``evidence.fabricated`` is ``unsupported`` (a stricter ``contradicted`` stands);
   one flagged with ``evidence.unbound_specifics`` is at most ``overstated``; so is one whose text
   the Verifier was shown cut (what follows the cut was never checked). A claim whose text *is*
   one of its Gatekeeper-verified refs, word for word (the whole text, or its first
   ``MAX_EXCERPT_CHARS`` characters, as a guided answer's chosen claims are), is a
   ``direct_observation`` whatever weaker label was proposed (a ``contradicted`` stands): there
   is nothing between the claim and its evidence to judge, and a small Verifier model was
   measured labelling such claims ``unsupported`` while its own detail said they were stated.
2. **Facts and score.** direct_observation -> direct_evidence (1.0); reasonable_inference and
   overstated -> indirect_support (0.6); unsupported and external_unknown -> no_evidence (0.0);
   contradicted -> contradicted (the score is 0.0). The score is the mean over claims, 0.0 with
   none.
3. **Derived verdict.** Any contradicted -> REJECT; PASS only if every claim is confirmed, one is
   a direct observation, the Gatekeeper did not fail and the score is at least 0.5; else
   LOW_CONFID.
4. **Question coverage** (``verification.coverage``). The deterministic floor (each service,
   alert and metric the question names is in a confirmed claim), made stricter, never looser,
   by the Verifier's own ``question_coverage`` and by tool calls the budget cut.
5. **Effective verdict.** The strictest of the model's verdict (unless the model does not
   judge: ``model_judges``, off under the local profile, where the Verifier model's labels are
   proposals like any other but its own verdict and question coverage are only recorded), the
   derived verdict, the parse
   cap (output not valid -> LOW_CONFID), the Gatekeeper cap (severity reject -> REJECT,
   low_confid -> LOW_CONFID), the fallback cap (the claim checker stood in for an unreadable
   reply -> LOW_CONFID), the coverage cap (question unanswered -> LOW_CONFID; a conclusion
   that does not follow from its claims, or a missing one, leaves it unanswered:
   ``verification.conclusion``), the re-check cap (the claim checker re-checks a recorded
   diagnosis a model judged -> LOW_CONFID: it can never clear a recorded verdict alone) and
   the fabrication rule (a claim flagged with
   ``evidence.fabricated`` -> REJECT, whatever severity the catalog gives the rule).

Verdicts are ranked here only (REJECT < LOW_CONFID < PASS): ``strictest`` and ``is_looser``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Final

from state.records import (
    CLAIM_LABELS,
    CONFIRMED_LABELS,
    Claim,
    ClaimCheck,
    ClaimLabel,
    Decision,
    ExecutorAnswer,
    FactCheck,
    FactLabel,
    GatekeeperResult,
    ParseStatus,
    ProposedCheck,
    TraceCitation,
    TraceItem,
    Verdict,
    VerifiedExcerpt,
    VerifierMode,
    VerifierReply,
)
from verification.catalog import FABRICATED, UNBOUND_SPECIFICS
from verification.conclusion import check_conclusion
from verification.coverage import coverage_cap, failed_calls, question_coverage
from verification.gatekeeper import only_knowledge, verified_excerpts_of
from verification.output_schemas import MAX_EXCERPT_CHARS
from verification.verifier_reply import short

LEGACY: Final[dict[ClaimLabel, FactLabel]] = {
    "direct_observation": "direct_evidence",
    "reasonable_inference": "indirect_support",
    "overstated": "indirect_support",
    "unsupported": "no_evidence",
    "external_unknown": "no_evidence",
    "contradicted": "contradicted",
}
"""Claim label -> legacy ``facts_checked`` label."""

VALUES: Final[dict[FactLabel, float]] = {
    "direct_evidence": 1.0,
    "indirect_support": 0.6,
    "no_evidence": 0.0,
    "contradicted": 0.0,
}
"""Score value of each legacy label (a contradicted fact forces the score to 0.0)."""

_VERDICT_RANK: Final[dict[Verdict, int]] = {"REJECT": 0, "LOW_CONFID": 1, "PASS": 2}
# Strictness of the claim labels, strictest first (picks among duplicate checks).
_LABEL_RANK: Final[dict[ClaimLabel, int]] = {
    "contradicted": 0,
    "unsupported": 1,
    "external_unknown": 2,
    "overstated": 3,
    "reasonable_inference": 4,
    "direct_observation": 5,
}
NOT_CHECKED: Final = "not in the Verifier's input (left out to keep it bounded)"

_KNOWLEDGE_CAPPED: Final[tuple[ClaimLabel, ...]] = (
    "direct_observation",
    "reasonable_inference",
    "overstated",
)


def label_of(value: str | None) -> ClaimLabel | None:
    """A proposed label as one of the six (case, spaces and hyphens tolerated), or None."""
    if value is None:
        return None
    key = value.strip().lower().replace("-", "_").replace(" ", "_")
    return next((label for label in CLAIM_LABELS if label == key), None)


def _with_reason(detail: str, reason: str) -> str:
    return f"{detail} [{reason}]" if detail else reason


def _index(
    proposed: Sequence[ProposedCheck], claims: Sequence[Claim], notes: list[str]
) -> dict[str, ProposedCheck]:
    """The proposed checks by claim id; of duplicates, the strictest stands."""
    known = {claim["claim_id"]: claim["claim_id"] for claim in claims}
    checks: dict[str, ProposedCheck] = {}
    for position, check in enumerate(proposed):
        claim_id = known.get(check["claim_id"])
        if claim_id is None:
            notes.append(
                f"claim_checks[{position}] names no executor claim "
                f"({short(check['claim_id'])}), dropped"
            )
            continue
        if claim_id in checks:
            notes.append(f"{claim_id}: checked more than once, the strictest check kept")
            old = _LABEL_RANK.get(label_of(checks[claim_id]["verification"]) or "unsupported", 1)
            if _LABEL_RANK.get(label_of(check["verification"]) or "unsupported", 1) < old:
                checks[claim_id] = check
            continue
        checks[claim_id] = check
    return checks


def _citations(
    check: ProposedCheck, trace: dict[str, TraceItem], claim_id: str, notes: list[str]
) -> list[TraceCitation]:
    """The citations whose trace item exists, with only that item's invocation ids."""
    merged: dict[str, TraceCitation] = {}
    for cited in check["evidence_refs"]:
        item = trace.get(cited["trace_ref"])
        if item is None:
            ref = short(dict(cited))
            notes.append(f"{claim_id}: evidence ref {ref} names no trace item, dropped")
            continue
        citation = merged.setdefault(
            item["trace_ref"],
            TraceCitation(
                trace_ref=item["trace_ref"], tool_name=item["tool_name"], source_invocation_ids=[]
            ),
        )
        for invocation_id in cited["source_invocation_ids"]:
            if invocation_id not in item["source_invocation_ids"]:
                notes.append(
                    f"{claim_id}: invocation id {short(invocation_id)} is not part of trace item "
                    f"{item['trace_ref']}, dropped"
                )
            elif invocation_id not in citation["source_invocation_ids"]:
                citation["source_invocation_ids"].append(invocation_id)
    return list(merged.values())


def _check(
    claim: Claim,
    proposed: ProposedCheck | None,
    gatekeeper: GatekeeperResult,
    trace: dict[str, TraceItem],
    unbound: set[str],
    unseen: set[str],
    clipped: Mapping[str, int],
    made_up: set[str],
    notes: list[str],
) -> ClaimCheck:
    """The final check of one claim (rule 1 of the module docstring)."""
    claim_id = claim["claim_id"]
    if claim_id in unseen:
        notes.append(f"{claim_id}: not in the Verifier's input -> unsupported")
        return ClaimCheck(
            claim_id=claim_id,
            verification="unsupported",
            detail=NOT_CHECKED,
            evidence_refs=[],
            model_verification=proposed["verification"] if proposed else None,
        )
    if proposed is None:
        notes.append(f"{claim_id}: not checked by the verifier -> unsupported")
        return ClaimCheck(
            claim_id=claim_id,
            verification="unsupported",
            detail="not checked by the verifier",
            evidence_refs=[],
            model_verification=None,
        )
    model_label = proposed["verification"]
    detail = proposed["detail"]
    label = label_of(model_label)
    if label is None:
        notes.append(f"{claim_id}: unknown label {short(model_label)} -> unsupported")
        detail = _with_reason(detail, f"unknown label {short(model_label)}")
        label = "unsupported"
    citations = _citations(proposed, trace, claim_id, notes)
    if label == "direct_observation" and not citations:
        notes.append(f"{claim_id}: direct_observation without a valid evidence ref -> unsupported")
        detail = _with_reason(detail, "no valid evidence ref")
        label = "unsupported"
    verified = verified_excerpts_of(gatekeeper, claim_id)
    if label in _VERBATIM_RAISED and is_verbatim(claim, verified):
        notes.append(
            f"{claim_id}: states its verified evidence word for word, {label} -> direct_observation"
        )
        detail = _with_reason(detail, "the claim is its verified evidence, word for word")
        label = "direct_observation"
        citations = citations or _bound_citations(claim, trace)
    if claim_id in made_up and label != "contradicted":
        # A name, code or cause nothing gathered holds was made up: never a fact, the verdict
        # is REJECT (``decide``).
        if label != "unsupported":
            notes.append(f"{claim_id}: {FABRICATED} failed, {label} -> unsupported")
        detail = _with_reason(detail, "names what none of the evidence gathered holds")
        label = "unsupported"
    elif not verified and label != "contradicted":
        if label != "unsupported":
            notes.append(f"{claim_id}: no Gatekeeper-verified binding, {label} -> unsupported")
            detail = _with_reason(detail, "no Gatekeeper-verified evidence binding")
        label = "unsupported"
    elif only_knowledge(verified) and label in _KNOWLEDGE_CAPPED:
        # Runbooks and past cases are never evidence about the current incident.
        notes.append(f"{claim_id}: only knowledge evidence, {label} -> external_unknown")
        detail = _with_reason(detail, "bound only to knowledge documents")
        label = "external_unknown"
    elif claim_id in unbound and label in CONFIRMED_LABELS:
        # A number, code or exception name in none of its verified evidence overstates it.
        notes.append(f"{claim_id}: {UNBOUND_SPECIFICS} failed, {model_label} -> overstated")
        detail = _with_reason(detail, "states specifics found in none of its verified evidence")
        label = "overstated"
    if claim_id in clipped and label in CONFIRMED_LABELS:
        # The rest of a cut claim text was never checked: it must not reach the user as verified.
        shown = clipped[claim_id]
        notes.append(f"{claim_id}: only its first {shown} characters were checked -> overstated")
        detail = _with_reason(
            detail, f"only the first {shown} characters of the claim were shown to the verifier"
        )
        label = "overstated"
    return ClaimCheck(
        claim_id=claim_id,
        verification=label,
        detail=detail,
        evidence_refs=citations,
        model_verification=model_label,
    )


_VERBATIM_RAISED: Final = frozenset(
    {"unsupported", "external_unknown", "overstated", "reasonable_inference"}
)


def is_verbatim(claim: Claim, verified: Sequence[VerifiedExcerpt]) -> bool:
    """Whether the claim's text is one of its verified refs of incident evidence, word for word.

    The whole text of the ref, or its first ``MAX_EXCERPT_CHARS`` characters (a cited excerpt
    is at most that long); whitespace at the ends aside. Knowledge (runbooks, past cases) never
    counts: it is not evidence about the incident.
    """
    said = claim["claim_text"].strip()
    if not said or not verified or only_knowledge(verified):
        return False
    for entry in verified:
        text = entry["text"].strip()
        if said == text or (
            len(text) > MAX_EXCERPT_CHARS and said == text[:MAX_EXCERPT_CHARS].strip()
        ):
            return True
    return False


def _bound_citations(claim: Claim, trace: Mapping[str, TraceItem]) -> list[TraceCitation]:
    """The trace items holding the invocations the claim's bindings name, with those ids."""
    bound = {binding["source_invocation_id"] for binding in claim["evidence_bindings"]}
    return [
        TraceCitation(
            trace_ref=item["trace_ref"],
            tool_name=item["tool_name"],
            source_invocation_ids=[i for i in item["source_invocation_ids"] if i in bound],
        )
        for item in trace.values()
        if bound & set(item["source_invocation_ids"])
    ]


def flagged(gatekeeper: GatekeeperResult, rule_id: str) -> set[str]:
    """The ids of the claims the Gatekeeper flagged with ``rule_id``."""
    return {
        claim_id
        for finding in gatekeeper["errors"]
        if finding["rule_id"] == rule_id and (claim_id := finding.get("claim_id"))
    }


def claim_checks(
    answer: ExecutorAnswer,
    proposed: Sequence[ProposedCheck] | None,
    gatekeeper: GatekeeperResult,
    trace: Sequence[TraceItem],
    notes: list[str],
    unseen: Collection[str] = (),
    clipped: Mapping[str, int] | None = None,
) -> list[ClaimCheck]:
    """Exactly one final check per executor claim, in claim order (rule 1).

    A claim in ``unseen`` was not in the Verifier's input: it is ``unsupported`` whatever the
    reply says about it. A claim in ``clipped`` was shown cut (its value: the characters shown):
    at most ``overstated``, since what follows the cut was never checked.
    """
    by_ref: dict[str, TraceItem] = {}
    for item in trace:
        by_ref.setdefault(item["trace_ref"], item)
    unbound = flagged(gatekeeper, UNBOUND_SPECIFICS)
    made_up = flagged(gatekeeper, FABRICATED)
    by_claim = _index(proposed or [], answer["claims"], notes)
    return [
        _check(
            claim,
            by_claim.get(claim["claim_id"]),
            gatekeeper,
            by_ref,
            unbound,
            set(unseen),
            clipped or {},
            made_up,
            notes,
        )
        for claim in answer["claims"]
    ]


def facts_of(checks: Sequence[ClaimCheck], answer: ExecutorAnswer) -> list[FactCheck]:
    """The legacy ``facts_checked`` list: one critical fact per claim check (rule 2)."""
    texts = {claim["claim_id"]: claim["claim_text"] for claim in answer["claims"]}
    return [
        FactCheck(
            fact=texts.get(check["claim_id"], ""),
            is_critical=True,
            verification=LEGACY[check["verification"]],
            detail=check["detail"],
            evidence_refs=list(check["evidence_refs"]),
        )
        for check in checks
    ]


def groundedness_score(facts: Sequence[FactCheck]) -> float:
    """0.0 with no critical fact or any contradicted one; else the mean value, in [0, 1]."""
    critical = [fact["verification"] for fact in facts if fact["is_critical"]]
    if not critical or "contradicted" in critical:
        return 0.0
    score = sum(VALUES[label] for label in critical) / len(critical)
    return round(min(1.0, max(0.0, score)), 4)


def derive_verdict(
    checks: Sequence[ClaimCheck], score: float, gatekeeper: GatekeeperResult
) -> Verdict:
    """The verdict the labels, the score and the Gatekeeper status support (rule 3)."""
    labels = [check["verification"] for check in checks]
    if "contradicted" in labels:
        return "REJECT"
    if (
        labels
        and all(label in CONFIRMED_LABELS for label in labels)
        and "direct_observation" in labels
        and gatekeeper["status"] != "fail"
        and score >= 0.5
    ):
        return "PASS"
    return "LOW_CONFID"


def strictest(*verdicts: Verdict | None) -> Verdict:
    """The strictest of the given verdicts (REJECT < LOW_CONFID < PASS); None is no bound."""
    return min((v for v in verdicts if v is not None), key=lambda v: _VERDICT_RANK[v])


def is_looser(verdict: str | None, than: str | None) -> bool:
    """Whether ``verdict`` is looser than ``than`` (PASS > LOW_CONFID > REJECT).

    A missing or unknown verdict on either side is never looser, nor looser than.
    """
    rank, other = _rank(verdict), _rank(than)
    return rank is not None and other is not None and rank > other


def _rank(verdict: str | None) -> int | None:
    return next((rank for name, rank in _VERDICT_RANK.items() if name == verdict), None)


def decide(
    answer: ExecutorAnswer,
    gatekeeper: GatekeeperResult,
    reply: VerifierReply,
    *,
    parse_status: ParseStatus,
    trace: Sequence[TraceItem],
    mode: VerifierMode,
    unseen: Collection[str] = (),
    clipped: Mapping[str, int] | None = None,
    question: str = "",
    known_services: Sequence[str] = (),
    not_run: Sequence[str] = (),
    recheck_of: VerifierMode | None = None,
    model_judges: bool = True,
) -> Decision:
    """Decide one round: final claim checks, facts, score, derived and effective verdicts.

    Args:
        answer: The executor's answer (its claims are the critical facts).
        gatekeeper: The Gatekeeper result of that answer.
        reply: The Verifier's reply, or the claim checker's when ``mode`` is ``fallback``
            (the model's reply was unreadable) or ``offline`` (the checker is the verifier).
        parse_status: How the executor's final message parsed.
        trace: The tool trace summary the Verifier saw.
        mode: How ``reply`` was produced.
        unseen: Claims left out of the Verifier's bounded input (never checked).
        clipped: Claims shown to the Verifier with their text cut, with the characters shown.
        question: The user's question (its facets are the coverage floor).
        known_services: The services the evidence backend knows.
        not_run: Tool calls the tool budget cut, rendered.
        recheck_of: When the decision re-checks a recorded diagnosis: the mode that judged it.
        model_judges: Whether the model's own verdict and question coverage bound the
            decision (rule 5); off, they are recorded and noted only.

    Returns:
        The decision; ``verdict`` is the effective verdict.
    """
    notes = list(reply["notes"])
    checks = claim_checks(answer, reply["claim_checks"], gatekeeper, trace, notes, unseen, clipped)
    facts = facts_of(checks, answer)
    score = groundedness_score(facts)
    stated = reply["groundedness_score"]
    if stated is not None and abs(stated - score) > 0.001:
        notes.append(f"verifier stated groundedness {stated}; computed {score} is used")
    derived = derive_verdict(checks, score, gatekeeper)
    model_verdict = None if mode == "fallback" else reply["verdict"]
    # Under the local profile the model's verdict and coverage are recorded, not applied.
    judging = model_judges or mode != "model"
    if not judging:
        notes.append(
            f"verifier model's own verdict {model_verdict} and question coverage recorded, not "
            "applied (local profile): code decides from the claim labels"
        )
    if mode == "fallback":
        notes.append(
            "verifier output could not be parsed; deterministic claim checker used, "
            "verdict capped at LOW_CONFID"
        )
    conclusion = check_conclusion(question, known_services, answer, checks, gatekeeper)
    if conclusion["status"] == "does_not_follow":
        notes.append(f"the conclusion does not follow from its claims: {conclusion['reason']}")
    elif conclusion["status"] == "missing":
        notes.append("the question wants a conclusion and the answer states none")
    coverage = question_coverage(
        question,
        known_services,
        answer,
        checks,
        model=None if mode == "fallback" or not judging else reply.get("question_coverage"),
        not_run=not_run,
        failed=failed_calls(trace),
        conclusion=conclusion["status"],
        conclusion_text=conclusion["text"],
    )
    if coverage["status"] != "answered":
        shown = ", ".join(coverage["unanswered"]) or "none"
        notes.append(f"question coverage {coverage['status']} (unanswered: {shown})")
    cap = coverage_cap(coverage)
    if cap is not None:
        notes.append("no confirmed claim answers the question; verdict capped at LOW_CONFID")
    caps: dict[str, Verdict | None] = {"none": None, "low_confid": "LOW_CONFID", "reject": "REJECT"}
    made_up = sorted(flagged(gatekeeper, FABRICATED))
    if made_up:
        notes.append(
            f"{', '.join(made_up)}: names what none of the evidence gathered holds "
            f"({FABRICATED}); verdict REJECT"
        )
    # The claim checker re-checking what a model judged works without that model: capped as the
    # fallback is. A diagnosis the checker judged in the first place is re-judged by its rules.
    rechecked = mode == "offline" and recheck_of is not None and recheck_of != "offline"
    verdict = strictest(
        model_verdict if judging else None,
        derived,
        None if parse_status["status"] == "valid" else "LOW_CONFID",
        caps[gatekeeper["severity"]],
        "LOW_CONFID" if mode == "fallback" else None,
        cap,
        "LOW_CONFID" if rechecked else None,
        "REJECT" if made_up else None,
    )
    if rechecked:
        notes.append("re-checked by the deterministic claim checker: at most LOW_CONFID")
    return Decision(
        verdict=verdict,
        model_verdict=model_verdict,
        derived_verdict=derived,
        groundedness_score=score,
        critical_fact_count=len(checks),
        claim_checks=checks,
        facts_checked=facts,
        rationale=reply["rationale"],
        verifier_mode=mode,
        notes=notes,
        unchecked=[claim["claim_id"] for claim in answer["claims"] if claim["claim_id"] in unseen],
        question_coverage=coverage,
        conclusion=conclusion,
    )
