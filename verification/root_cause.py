"""The root cause a diagnosis states: the executor's proposal, kept only when it was confirmed.

The executor may propose a root cause in its answer (``root_cause``: a service, its mechanism and
the ids of the claims that state it). The diagnosis keeps it only when

- the verdict is not REJECT (a REJECT answer states no root cause anywhere);
- every claim it names exists and was confirmed (final label ``direct_observation`` or
  ``reasonable_inference``: an inference from verified observations);
- one of those claims names the service.

Otherwise the diagnosis states no root cause (``None``): a suspect with no confirmed evidence is
never stated. The suspects of the incident analysis are read from its recorded invocations.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from state.json_shape import is_number, objects
from state.records import ClaimCheck, ExecutorAnswer, Invocation, RootCause, SuspectBrief
from verification.text import normalize, normalize_id

CONFIRMED: Final = frozenset({"direct_observation", "reasonable_inference"})
ANALYSIS_TOOL: Final = "analyze_incident"
MAX_SUSPECTS: Final = 8


def _names(text: str, service: str) -> bool:
    name = re.escape(normalize(service))
    return re.search(rf"(?<![a-z0-9_-]){name}(?![a-z0-9_-])", normalize(text)) is not None


def confirmed_root_cause(
    answer: ExecutorAnswer,
    checks: Sequence[ClaimCheck],
    verdict: str | None,
    suspects: Sequence[SuspectBrief] = (),
) -> RootCause | None:
    """The proposed root cause when it stands (see the module docstring), else None.

    An answer without a ``root_cause`` object proposes one when a claim states the analysis's
    root-cause suspect by citing its ``suspects[i]`` ref (as a guided model's chosen claims do:
    it cannot write the object): that suspect, when the claim was confirmed and names it.
    ``suspects`` are the diagnosis's (``analysis_suspects``).
    """
    if verdict not in ("PASS", "LOW_CONFID"):
        return None
    labels = {normalize_id(check["claim_id"]): check["verification"] for check in checks}
    proposal = answer.get("root_cause")
    if proposal is None:
        return _stated_suspect(answer, labels, suspects)
    texts = {normalize_id(claim["claim_id"]): claim["claim_text"] for claim in answer["claims"]}
    ids = list(dict.fromkeys(normalize_id(claim_id) for claim_id in proposal["claim_ids"]))
    if not ids or any(labels.get(claim_id) not in CONFIRMED for claim_id in ids):
        return None
    if not any(_names(texts.get(claim_id, ""), proposal["service"]) for claim_id in ids):
        return None
    return RootCause(service=proposal["service"], mechanism=proposal["mechanism"], claim_ids=ids)


def _stated_suspect(
    answer: ExecutorAnswer, labels: Mapping[str, str], suspects: Sequence[SuspectBrief]
) -> RootCause | None:
    for claim in answer["claims"]:
        claim_id = normalize_id(claim["claim_id"])
        if labels.get(claim_id) not in CONFIRMED:
            continue
        for binding in claim["evidence_bindings"]:
            found = re.fullmatch(r"suspects\[(\d+)\]", str(binding.get("raw_path") or ""))
            if binding.get("tool_name") != ANALYSIS_TOOL or found is None:
                continue
            index = int(found.group(1))
            suspect = suspects[index] if index < len(suspects) else None
            named = suspect and _names(claim["claim_text"], suspect["service"])
            if suspect and suspect["root_cause"] and named:
                return RootCause(
                    service=suspect["service"], mechanism=suspect["mechanism"], claim_ids=[claim_id]
                )
    return None


def analysis_suspects(invocations: Iterable[Invocation]) -> list[SuspectBrief]:
    """The ranked suspects of the diagnosis's last ``analyze_incident`` that answered."""
    last: list[SuspectBrief] = []
    for invocation in invocations:
        output = invocation.get("output")
        if invocation["tool_name"] != ANALYSIS_TOOL or invocation["status"] == "error":
            continue
        if not isinstance(output, dict):
            continue
        last = []
        for rank, row in enumerate(objects(output.get("suspects"))[:MAX_SUSPECTS], start=1):
            score = row.get("score")
            onset = row.get("onset")
            last.append(
                SuspectBrief(
                    rank=int(row["rank"]) if is_number(row.get("rank")) else rank,
                    service=str(row.get("service", "")),
                    score=float(score) if is_number(score) else 0.0,
                    mechanism=str(row.get("mechanism", "")),
                    onset=onset if isinstance(onset, str) else None,
                    root_cause=row.get("root_cause") is True,
                )
            )
    return last
