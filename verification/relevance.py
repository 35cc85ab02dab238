"""The recorded refs in the order a guided answer is offered them: the most relevant first.

A small model choosing the claims of its answer from a list of refs (``SUPERBIZ_MODEL_PROFILE=
local``) takes the first ones whatever they say: in measured runs it answered "why is X failing?"
with the first four ERROR lines although the incident analysis had named the cause, and a CPU
question with the first firing alert. The list and the schema's choices are therefore ordered by
what the question asks, in code; the model still chooses, and nothing is added or removed.

- **By what the ref names of the question**: each metric concept it asks about
  (``knowledge.vocabulary``: ``cpu``, ``latency``, ``p99``) and each alert name weighs
  ``STRONG``; each HTTP status code and symptom concept (``timeout``, ``error``, ``alert``)
  ``MEDIUM``; each service ``WEAK`` (most refs of a diagnosis about one service name it). A ref's
  kind counts as its words (an ``alert`` ref is about an alert, whatever its text says). When the
  question names services, a ref naming none of them gains nothing from concepts or codes: the
  CPU of another service, or another service's alert, does not answer it. Equal refs keep the
  ledger's order.
- **A why question** (``verification.question`` kind ``why``) whose incident analysis named a
  root cause: the root-cause suspect (``analyze_incident`` ``suspects[i]``) first, then the most
  relevant ref of the symptom asked about (so an answer of two claims is the cause and the
  symptom, and names what was asked), then the first evidence of the root cause's strongest
  signal (the observation the cause rests on), then the rest.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from knowledge.vocabulary import concepts_in
from state.json_shape import objects
from state.records import Invocation, QuestionFacets
from verification.coverage import names_facet
from verification.output_schemas import CitableRef
from verification.question import analyze_question
from verification.root_cause import ANALYSIS_TOOL

STRONG: Final = 4
MEDIUM: Final = 2
WEAK: Final = 1
Key = tuple[str, str]
"""``(invocation id, raw path)``."""


def _root_keys(invocations: Sequence[Invocation]) -> tuple[list[Key], list[Key]]:
    """The refs stating each analysis's root cause, and the first evidence of its top signal."""
    causes: list[Key] = []
    evidence: list[Key] = []
    for invocation in invocations:
        output = invocation.get("output")
        if invocation["tool_name"] != ANALYSIS_TOOL or not isinstance(output, dict):
            continue
        signals = objects(output.get("signals"))
        for index, suspect in enumerate(objects(output.get("suspects"))):
            if suspect.get("root_cause") is not True:
                continue
            causes.append((invocation["invocation_id"], f"suspects[{index}]"))
            own = [
                position
                for position in suspect.get("signals") or []
                if isinstance(position, int) and 0 <= position < len(signals)
            ]
            if own:
                evidence.append((invocation["invocation_id"], f"signals[{own[0]}].evidence[0]"))
    return causes, evidence


def _weight(ref: CitableRef, read: QuestionFacets) -> int:
    text = ref["excerpt"]
    named = [facet for facet in read["facets"] if names_facet(facet, text)]
    services = [facet for facet in read["facets"] if facet["kind"] == "service"]
    weight = sum(WEAK if facet["kind"] == "service" else STRONG for facet in named)
    if services and not any(facet["kind"] == "service" for facet in named):
        # About another service: what it says of the asked metric or symptom is not the answer.
        return sum(STRONG for facet in named if facet["kind"] == "alert")
    for code in read["status_codes"]:
        if re.search(rf"(?<![0-9]){re.escape(code)}(?![0-9])", text):
            weight += MEDIUM
    found = set(concepts_in(f"{ref['source_type']} {text}"))
    weight += MEDIUM * sum(1 for symptom in read["symptoms"] if symptom in found)
    return weight


def by_relevance(
    refs: Sequence[CitableRef],
    invocations: Sequence[Invocation],
    question: str,
    known_services: Sequence[str],
) -> list[CitableRef]:
    """``refs`` reordered for ``question`` (see the module docstring); the same refs, none lost.

    Args:
        refs: The citable refs of the diagnosis (``citable_refs``), in ledger order.
        invocations: The recorded invocations they come from (the analysis's output says which
            suspect is the root cause).
        question: The user's question.
        known_services: The services the evidence backends know.
    """
    read = analyze_question(question, known_services)
    weights = [_weight(ref, read) for ref in refs]
    order = sorted(range(len(refs)), key=lambda index: (-weights[index], index))
    ranked = [refs[index] for index in order]
    causes, evidence = _root_keys(invocations) if read["kind"] == "why" else ([], [])
    if not causes:
        return ranked

    def key(ref: CitableRef) -> Key:
        return (ref["invocation_id"], ref["raw_path"])

    first = [ref for ref in ranked if key(ref) in causes]
    support = [ref for ref in ranked if key(ref) in evidence]
    rest = [ref for ref in ranked if key(ref) not in causes and key(ref) not in evidence]
    symptom = rest[:1] if rest and _weight(rest[0], read) > 0 else []
    return [*first, *symptom, *support, *rest[len(symptom) :]]
