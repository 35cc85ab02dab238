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
from collections.abc import Iterable, Sequence
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
    answer: ExecutorAnswer, checks: Sequence[ClaimCheck], verdict: str | None
) -> RootCause | None:
    """The proposed root cause when it stands (see the module docstring), else None."""
    proposal = answer.get("root_cause")
    if proposal is None or verdict not in ("PASS", "LOW_CONFID"):
        return None
    labels = {normalize_id(check["claim_id"]): check["verification"] for check in checks}
    texts = {normalize_id(claim["claim_id"]): claim["claim_text"] for claim in answer["claims"]}
    ids = list(dict.fromkeys(normalize_id(claim_id) for claim_id in proposal["claim_ids"]))
    if not ids or any(labels.get(claim_id) not in CONFIRMED for claim_id in ids):
        return None
    if not any(_names(texts.get(claim_id, ""), proposal["service"]) for claim_id in ids):
        return None
    return RootCause(service=proposal["service"], mechanism=proposal["mechanism"], claim_ids=ids)


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
