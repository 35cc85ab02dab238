"""Offline verifier: the deterministic claim checker behind the chat-model interface.

Like a model, it reads only the Verifier payload (quoted in its human message); the payload's
blocks are bounded copies of the records, so they are read back leniently: what does not parse
is left out, which can only make a claim less supported.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TypeVar

from langchain_core.messages import AIMessage, BaseMessage
from pydantic import TypeAdapter, ValidationError

from models.messages import humans, message_text
from models.offline.base import OfflineModel
from state.json_shape import items, obj
from state.records import (
    Finding,
    GatekeeperResult,
    GatekeeperStatus,
    JSONObject,
    ParseStatus,
    Severity,
    TraceItem,
    VerifiedExcerpt,
)
from verification.claim_checker import check_claims
from verification.executor_output import read_answer
from verification.verifier_payload import extract_payload

_T = TypeVar("_T")
_VALID = ParseStatus(status="valid", fence_stripped=False, error=None)


def _read(adapter: TypeAdapter[_T], value: object) -> _T | None:
    try:
        return adapter.validate_python(value)
    except ValidationError:
        return None


_EXCERPT: TypeAdapter[VerifiedExcerpt] = TypeAdapter(VerifiedExcerpt)
_FINDING: TypeAdapter[Finding] = TypeAdapter(Finding)
_TRACE_ITEM: TypeAdapter[TraceItem] = TypeAdapter(TraceItem)
_STATUS: TypeAdapter[GatekeeperStatus] = TypeAdapter(GatekeeperStatus)
_SEVERITY: TypeAdapter[Severity] = TypeAdapter(Severity)


def _items(adapter: TypeAdapter[_T], value: object) -> list[_T]:
    found = [_read(adapter, item) for item in items(value)]
    return [item for item in found if item is not None]


def excerpts_of(value: object) -> dict[str, list[VerifiedExcerpt]]:
    """Each claim's verified excerpts that parse (the block's bound may cut the last ones)."""
    return {str(claim_id): _items(_EXCERPT, excerpts) for claim_id, excerpts in obj(value).items()}


def gatekeeper_of(block: JSONObject) -> GatekeeperResult:
    """The payload's Gatekeeper block as a result (an unreadable part counts as failed)."""
    return GatekeeperResult(
        status=_read(_STATUS, block.get("status")) or "fail",
        severity=_read(_SEVERITY, block.get("severity")) or "reject",
        checked_bindings=0,
        failed_rules=[],
        warnings=[],
        errors=_items(_FINDING, block.get("errors")),
        verified_excerpts=excerpts_of(block.get("verified_excerpts")),
        rule_set_version="",
        rules=[],
    )


class OfflineVerifier(OfflineModel):
    """Compares each claim's concrete tokens with its Gatekeeper-verified excerpts."""

    def respond(self, messages: list[BaseMessage], *, tools: Sequence[str] = ()) -> AIMessage:
        """Return the claim checks for the payload in the last human message."""
        payload: JSONObject = {}
        for message in humans(messages):
            payload = extract_payload(message_text(message)) or payload
        reply = check_claims(
            read_answer(_VALID, payload.get("executor_structured_output")),
            gatekeeper_of(obj(payload.get("gatekeeper_result"))),
            _items(_TRACE_ITEM, payload.get("tool_trace_summary")),
        )
        return AIMessage(
            content=json.dumps(
                {
                    "verdict": reply["verdict"],
                    "groundedness_score": reply["groundedness_score"],
                    "claim_checks": reply["claim_checks"],
                    "rationale": "offline rule-based check: " + reply["rationale"],
                },
                ensure_ascii=False,
            )
        )
