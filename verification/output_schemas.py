"""JSON schemas of what each role replies, sent as ``response_format`` where the endpoint takes it.

A schema constrains the shape only (an endpoint that accepts one, such as llama.cpp's server,
vLLM or Ollama, then cannot produce a stray brace or prose around the object). Everything the
reply says is still read and checked as before (``verification.executor_output``,
``verification.verifier_reply``, ``verification.composer_check``): the schema is never trusted
for meaning, and an endpoint that refuses it gets the same prompt without it.
"""

from __future__ import annotations

from state.records import CLAIM_LABELS, CLAIM_TYPES, COVERAGE_STATUSES, VERDICTS, JSONObject

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

EXECUTOR: JSONObject = _object(
    {
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
    },
    required=["answer_version", "claims", "hypotheses", "recommended_actions", "missing_info"],
)

VERIFIER: JSONObject = _object(
    {
        "rationale": _TEXT,
        "claim_checks": _items(
            _object(
                {
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
            )
        ),
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

SCHEMAS: dict[str, JSONObject] = {
    "planner_plan": PLANNER,
    "executor_evidence_v2": EXECUTOR,
    "verifier_claim_checks": VERIFIER,
    "composer_sections": COMPOSER,
}
"""Each schema under the name it is sent with."""
