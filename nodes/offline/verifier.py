"""Offline verifier: the deterministic claim checker behind the chat-model interface."""

from __future__ import annotations

import json

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from nodes.common import message_text
from nodes.offline.base import OfflineModel
from verification.claim_checker import check_claims
from verification.verifier_payload import extract_payload


class OfflineVerifier(OfflineModel):
    """Compares each claim's concrete tokens with its Gatekeeper-verified excerpts."""

    def respond(self, messages: list[BaseMessage]) -> AIMessage:
        """Return the claim checks for the payload in the last human message."""
        payload: dict = {}
        for message in messages:
            if isinstance(message, HumanMessage):
                payload = extract_payload(message_text(message)) or payload
        structured = payload.get("executor_structured_output")
        result = check_claims(
            structured if isinstance(structured, dict) else None,
            payload.get("gatekeeper_result") or {},
            payload.get("tool_trace_summary") or [],
        )
        result["rationale"] = "offline rule-based check: " + str(result.get("rationale", ""))
        return AIMessage(content=json.dumps(result, ensure_ascii=False))
