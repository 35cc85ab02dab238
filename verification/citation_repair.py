"""Citation repair: a claim's specifics that its bindings miss, bound to a ref that states them.

A small model cites one log line and states a value another line of the same result holds ("order
service returns 500 errors", bound to a pool-timeout line while the next line says
``status=500``): the Gatekeeper rightly finds ``500`` unbound. Under the local model profile the
evidence node repairs such a citation before the Gatekeeper runs (``nodes.evidence``): for each
specific of a claim that none of its bound refs states (``verification.text.grounded``, the
Gatekeeper's own test), the first ref of an invocation **the claim already cites** that states it
is added as a binding, with the ref's whole text as its excerpt and ``added_by`` set, so the
record shows which bindings the model wrote and which the repair added.

What is never done: a ref of an invocation the claim does not cite is not added (the model chose
its sources), guidance (runbooks) never grounds anything, a specific no cited ref states stays
unbound (the Gatekeeper then caps the claim as before), and at most ``MAX_ADDED`` bindings are
added per claim. The repair only adds real refs: the Gatekeeper still checks every binding, the
Verifier still labels the claim, and the verdict rules are unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from state.records import Binding, Claim, EvidenceRef, ExecutorAnswer, Invocation
from tools.refs import grounding_text
from tools.registry import is_guidance
from verification.text import grounded, specifics

ADDED_BY: Final = "citation_repair"
"""The ``added_by`` of a binding the repair added."""

MAX_ADDED: Final = 2
"""Bindings the repair adds to one claim at most."""


def _ref_text(row: Invocation, raw_path: str) -> str:
    return next((r["text"] for r in _refs(row) if r["raw_path"] == raw_path), "")


def _bound_texts(
    claim: Claim, by_id: dict[str, Invocation]
) -> tuple[list[str], list[str], set[str]]:
    texts: list[str] = []
    names: list[str] = []
    cited: set[str] = set()
    for binding in claim["evidence_bindings"]:
        invocation_id = binding.get("source_invocation_id")
        raw_path = binding.get("raw_path")
        row = by_id.get(invocation_id or "")
        if row is None or not raw_path or is_guidance(row["tool_name"]):
            continue
        cited.add(row["invocation_id"])
        texts.append(grounding_text(row, raw_path))
        names.append(_ref_text(row, raw_path))
    return texts, names, cited


def _refs(row: Invocation) -> list[EvidenceRef]:
    return list(row["retrieval_details"].get("evidence_refs") or [])


def repair_claim(claim: Claim, by_id: dict[str, Invocation]) -> Claim:
    """``claim`` with bindings added for the specifics its bound refs miss (see the module)."""
    texts, names, cited = _bound_texts(claim, by_id)
    if not cited:
        return claim

    def unbound(token: str) -> bool:
        return not grounded(token, texts, name_texts=names)

    missing = [token for token in specifics(claim["claim_text"]) if unbound(token)]
    added: list[Binding] = []
    bound = {(b.get("source_invocation_id"), b.get("raw_path")) for b in claim["evidence_bindings"]}
    for token in missing:
        if len(added) >= MAX_ADDED or not unbound(token):
            continue
        for invocation_id in sorted(cited, key=lambda i: (len(i), i)):
            row = by_id[invocation_id]
            ref = next(
                (
                    ref
                    for ref in _refs(row)
                    if (invocation_id, ref["raw_path"]) not in bound
                    and grounded(
                        token, [grounding_text(row, ref["raw_path"])], name_texts=[ref["text"]]
                    )
                ),
                None,
            )
            if ref is None:
                continue
            added.append(
                Binding(
                    index=len(claim["evidence_bindings"]) + len(added),
                    source_type=ref["source_type"],
                    tool_name=row["tool_name"],
                    source_invocation_id=invocation_id,
                    source_invocation_ids=None,
                    raw_path=ref["raw_path"],
                    evidence_excerpt=ref["text"],
                    bad_fields={},
                    added_by=ADDED_BY,
                )
            )
            bound.add((invocation_id, ref["raw_path"]))
            texts.append(grounding_text(row, ref["raw_path"]))
            names.append(ref["text"])
            break
    if not added:
        return claim
    return {**claim, "evidence_bindings": [*claim["evidence_bindings"], *added]}


def repair_citations(answer: ExecutorAnswer, invocations: Sequence[Invocation]) -> ExecutorAnswer:
    """``answer`` with each claim's citations repaired (a new answer; ``answer`` is unchanged)."""
    by_id = {row["invocation_id"]: row for row in invocations}
    claims = [repair_claim(claim, by_id) for claim in answer["claims"]]
    if all(new is old for new, old in zip(claims, answer["claims"], strict=True)):
        return answer
    return {**answer, "claims": claims}
