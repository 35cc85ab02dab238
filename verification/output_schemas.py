"""JSON schemas of what each role replies, sent as ``response_format`` where the endpoint takes it.

A schema constrains the shape only (an endpoint that accepts one, such as llama.cpp's server,
vLLM or Ollama, then cannot produce a stray brace or prose around the object). Everything the
reply says is still read and checked as before (``verification.executor_output``,
``verification.verifier_reply``, ``verification.composer_check``): the schema is never trusted
for meaning, and an endpoint that refuses it gets the same prompt without it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TypedDict

from state.display import one_line
from state.records import (
    CLAIM_LABELS,
    CLAIM_TYPES,
    COVERAGE_STATUSES,
    VERDICTS,
    Invocation,
    JSONObject,
    JSONValue,
)

MAX_PLAN_STEPS = 6
"""Most steps a plan keeps (the planner's schema and its text fallback both bound it)."""
MAX_STEP_CHARS = 240
"""Longest plan step kept."""

_TEXT: JSONObject = {"type": "string"}
_TEXTS: JSONObject = {"type": "array", "items": {"type": "string"}}


def _object(properties: JSONObject, required: list[str] | None = None) -> JSONObject:
    return {
        "type": "object",
        "properties": properties,
        "required": [*(list(properties) if required is None else required)],
        "additionalProperties": False,
    }


def _items(item: JSONObject) -> JSONObject:
    return {"type": "array", "items": item}


PLANNER: JSONObject = _object(
    {
        "steps": {
            "type": "array",
            "items": {"type": "string", "maxLength": MAX_STEP_CHARS},
            "minItems": 1,
            "maxItems": MAX_PLAN_STEPS,
        }
    }
)

_BINDING: JSONObject = _object(
    {
        "source_type": _TEXT,
        "tool_name": _TEXT,
        "source_invocation_id": _TEXT,
        "raw_path": _TEXT,
        "evidence_excerpt": _TEXT,
    }
)

_EXECUTOR_PROPERTIES: JSONObject = {
    "answer_version": {"type": "string", "enum": ["executor_evidence_v2"]},
    "claims": _items(
        _object(
            {
                "claim_id": _TEXT,
                "claim_type": {"type": "string", "enum": list(CLAIM_TYPES)},
                "claim_text": _TEXT,
                "support_level": {"type": "string", "enum": ["direct", "indirect"]},
                "evidence_bindings": _items(_BINDING),
            }
        )
    ),
    "hypotheses": _items(_object({"text": _TEXT, "basis": _TEXT})),
    "recommended_actions": _items(_object({"text": _TEXT, "source": _TEXT})),
    "missing_info": _items(_object({"text": _TEXT}, required=["text"])),
    "conclusion": _object(
        {
            "text": _TEXT,
            "answer": {"type": "string", "enum": ["yes", "no", "value", "unknown"]},
            "rests_on": _TEXTS,
        }
    ),
}

EXECUTOR: JSONObject = _object(
    _EXECUTOR_PROPERTIES,
    required=["answer_version", "claims", "hypotheses", "recommended_actions", "missing_info"],
)

_CHECK: JSONObject = {
    "claim_id": _TEXT,
    "detail": _TEXT,
    "verification": {"type": "string", "enum": list(CLAIM_LABELS)},
    "evidence_refs": _items(
        _object(
            {
                "trace_ref": _TEXT,
                "tool_name": _TEXT,
                "source_invocation_ids": _TEXTS,
            }
        )
    ),
}

VERIFIER: JSONObject = _object(
    {
        "rationale": _TEXT,
        "claim_checks": _items(_object(_CHECK)),
        "question_coverage": _object(
            {
                "status": {"type": "string", "enum": list(COVERAGE_STATUSES)},
                "asked": _TEXTS,
                "unanswered": _TEXTS,
            }
        ),
        "critical_fact_count": {"type": "integer"},
        "groundedness_score": {"type": "number"},
        "verdict": {"type": "string", "enum": list(VERDICTS)},
    }
)

COMPOSER: JSONObject = _object(
    {
        "summary": _TEXT,
        "summary_claim_ids": _TEXTS,
        "confirmed": _items(_object({"claim_id": _TEXT, "text": _TEXT})),
        "directions": _items(_object({"text": _TEXT})),
        "gaps": _items(_object({"text": _TEXT})),
        "next_steps": _items(_object({"text": _TEXT})),
    }
)

MAX_CITABLE_REFS = 48
"""Most evidence refs a diagnosis's executor schema lists as citable choices."""
MAX_REFS_PER_INVOCATION = 12
"""Most refs of one invocation listed (its first ones, in order, and always its ``summary``)."""
MAX_EXCERPT_CHARS = 240
"""Longest excerpt offered for one ref: the start of its text (so still a substring of it)."""
MAX_BINDINGS = 3
"""Most bindings one claim may carry under the diagnosis's schema."""
MAX_CLAIMS = 4
"""Most claims of a guided answer (a small model's answer stays short)."""
MAX_ANSWER_TEXT_CHARS = 240
"""Longest hypothesis or action of a guided answer."""
MAX_SIDE_ITEMS = 2
"""Most hypotheses, recommended actions and missing-info items of a guided answer."""
GUIDED_CLAIM_TYPES = ("observation", "negative_observation", "state")
"""The claim types of a guided answer: what evidence shows directly (causes are hypotheses)."""


class CitableRef(TypedDict):
    """One evidence ref of a recorded invocation, as the executor may cite it."""

    invocation_id: str
    tool_name: str
    source_type: str
    raw_path: str
    excerpt: str


def citable_refs(invocations: Sequence[Invocation]) -> list[CitableRef]:
    """The refs the diagnosis's invocations recorded, bounded: what a binding may point at.

    Per invocation its first ``MAX_REFS_PER_INVOCATION`` refs and its ``summary`` ref, in
    ledger order, at most ``MAX_CITABLE_REFS`` in all; each excerpt is the start of the ref's
    text (at most ``MAX_EXCERPT_CHARS``), so it is contained in the text the Gatekeeper reads.
    """
    found: list[CitableRef] = []
    for invocation in invocations:
        refs = invocation["retrieval_details"].get("evidence_refs") or []
        chosen = [ref for ref in refs if ref["raw_path"] != "summary"][:MAX_REFS_PER_INVOCATION]
        chosen += [ref for ref in refs if ref["raw_path"] == "summary"][:1]
        for ref in chosen:
            excerpt = ref["text"][:MAX_EXCERPT_CHARS].strip()
            if not excerpt:
                continue
            found.append(
                CitableRef(
                    invocation_id=invocation["invocation_id"],
                    tool_name=invocation["tool_name"],
                    source_type=ref["source_type"],
                    raw_path=ref["raw_path"],
                    excerpt=excerpt,
                )
            )
    return found[:MAX_CITABLE_REFS]


def _fixed(value: str) -> JSONObject:
    return {"type": "string", "enum": [value]}


def executor_schema_for(refs: Sequence[CitableRef], *, guided: bool = False) -> JSONObject:
    """The executor's final-answer schema whose bindings can only name ``refs``.

    Each binding is one of the refs as a whole (its invocation id, tool, raw path and excerpt
    fixed together), so a constrained reply cites only what the ledger recorded for this
    diagnosis, and every claim cites at least one. In a claim the bindings come before the
    claim text, so the text is written after its evidence was chosen. Whether the text says
    what its evidence says is still for the Gatekeeper's rules and the Verifier. Without refs
    (nothing citable was recorded) it is the plain schema.

    ``guided`` (a small local model, ``SUPERBIZ_MODEL_PROFILE=local``) makes the model choose
    its claims instead of writing them: each claim is one recorded ref, named by its key
    (``ref_key``) and typed, which ``written_out`` turns into the claim stating that ref in its
    own words (its excerpt is the claim text, the ref its binding). What the model contributes is
    which evidence answers the question and how it is typed; a name is a few tokens to generate
    where the excerpt written twice was hundreds. Its own words go where nothing
    is shown as fact: at most ``MAX_SIDE_ITEMS`` hypotheses, actions and missing-info items of
    at most ``MAX_ANSWER_TEXT_CHARS``. At most ``MAX_CLAIMS`` claims of type observation,
    negative_observation or state, and no ``conclusion`` object (code derives the conclusion
    from the confirmed claims).
    """
    if not refs:
        return EXECUTOR
    if not guided:
        bindings: JSONObject = {
            "type": "array",
            "items": {"anyOf": [_choice(ref) for ref in refs]},
            "minItems": 1,
            "maxItems": MAX_BINDINGS,
        }
        claim = _object(
            {
                "claim_id": _TEXT,
                "claim_type": {"type": "string", "enum": list(CLAIM_TYPES)},
                "evidence_bindings": bindings,
                "claim_text": _TEXT,
                "support_level": {"type": "string", "enum": ["direct", "indirect"]},
            }
        )
        properties: JSONObject = {**_EXECUTOR_PROPERTIES, "claims": _items(claim)}
        return {**EXECUTOR, "properties": properties}
    chosen = _object(
        {
            "ref": {"type": "string", "enum": list(dict.fromkeys(ref_key(ref) for ref in refs))},
            "claim_type": {"type": "string", "enum": list(GUIDED_CLAIM_TYPES)},
        }
    )
    sentence: JSONObject = {"type": "string", "maxLength": MAX_ANSWER_TEXT_CHARS}

    def few(item: JSONObject) -> JSONObject:
        return {"type": "array", "items": item, "maxItems": MAX_SIDE_ITEMS}

    guided_properties: JSONObject = {
        "answer_version": _EXECUTOR_PROPERTIES["answer_version"],
        "claims": {"type": "array", "items": chosen, "minItems": 1, "maxItems": MAX_CLAIMS},
        "hypotheses": few(_object({"text": sentence, "basis": sentence})),
        "recommended_actions": few(_object({"text": sentence, "source": _TEXT})),
        "missing_info": few(_object({"text": sentence}, required=["text"])),
    }
    return {**EXECUTOR, "properties": guided_properties}


def ref_key(ref: CitableRef) -> str:
    """How a guided answer names a ref it chooses: ``<invocation id> <raw path>``."""
    return f"{ref['invocation_id']} {ref['raw_path']}"


MENU_EXCERPT_CHARS = 120
"""Longest start of a ref's text the guided answer request lists beside its key."""


def ref_menu(refs: Sequence[CitableRef]) -> str:
    """The refs a guided answer may choose, one per line: ``- <key>: <start of its text>``."""
    lines = [f"- {ref_key(ref)}: {one_line(ref['excerpt'], MENU_EXCERPT_CHARS)}" for ref in refs]
    return "\n".join(lines) or "(none)"


def written_out(text: str, refs: Sequence[CitableRef]) -> str:
    """A guided reply with each chosen ref written out as a whole claim (``executor_schema_for``).

    A chosen item (``{"ref": "<invocation id> <raw path>", "claim_type": ...}``) naming one of
    ``refs`` becomes claim ``c<n>``: that ref as its one binding, its excerpt as the claim text,
    support ``direct``. Anything else is left as written, for the answer's reader and the
    Gatekeeper to judge (an item naming no recorded ref is no claim, and fails there); a reply
    that is no JSON object is returned unchanged.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return text
    if not isinstance(data, dict) or not isinstance(data.get("claims"), list):
        return text
    by_key = {ref_key(ref): ref for ref in refs}
    claims: list[object] = []
    for number, item in enumerate(data["claims"], start=1):
        ref = by_key.get(str(item.get("ref"))) if isinstance(item, dict) else None
        if ref is None or not isinstance(item, dict):
            claims.append(item)
            continue
        claims.append(
            {
                "claim_id": f"c{number}",
                "claim_type": item.get("claim_type", "observation"),
                "evidence_bindings": [
                    {
                        "source_type": ref["source_type"],
                        "tool_name": ref["tool_name"],
                        "source_invocation_id": ref["invocation_id"],
                        "raw_path": ref["raw_path"],
                        "evidence_excerpt": ref["excerpt"],
                    }
                ],
                "claim_text": ref["excerpt"],
                "support_level": "direct",
            }
        )
    return json.dumps({**data, "claims": claims}, ensure_ascii=False)


def _choice(ref: CitableRef) -> JSONObject:
    """One binding fixed to ``ref`` as a whole."""
    return _object(
        {
            "source_invocation_id": _fixed(ref["invocation_id"]),
            "raw_path": _fixed(ref["raw_path"]),
            "evidence_excerpt": _fixed(ref["excerpt"]),
            "tool_name": _fixed(ref["tool_name"]),
            "source_type": _fixed(ref["source_type"]),
        }
    )


def verifier_schema_for(claim_ids: Sequence[str]) -> JSONObject:
    """The Verifier's schema for one payload: one check per claim shown, by its id.

    ``claim_checks`` holds exactly as many checks as ``claim_ids`` (the claims the payload shows)
    and each names one of them, so a constrained model cannot skip a claim (a claim left without
    a check is unsupported) or check one that does not exist. Without ids it is the plain schema.
    """
    ids = list(dict.fromkeys(claim_ids))
    if not ids:
        return VERIFIER
    names: list[JSONValue] = [*ids]
    check = _object({**_CHECK, "claim_id": {"type": "string", "enum": names}})
    bounded: JSONObject = {
        "type": "array",
        "items": check,
        "minItems": len(ids),
        "maxItems": len(ids),
    }
    properties = VERIFIER["properties"]
    assert isinstance(properties, dict)
    return {**VERIFIER, "properties": {**properties, "claim_checks": bounded}}


SCHEMAS: dict[str, JSONObject] = {
    "planner_plan": PLANNER,
    "executor_evidence_v2": EXECUTOR,
    "verifier_claim_checks": VERIFIER,
    "composer_sections": COMPOSER,
}
"""Each schema under the name it is sent with."""
