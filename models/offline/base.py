"""Base of the offline models: deterministic rules behind the chat-model interface.

They let the whole graph (prompts, tool ledger, Gatekeeper, verdict code, Composer) run with no
language model. They are labelled ``offline-rules`` everywhere and never claim to be an LLM.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from models.chat_model import CallableChatModel, GenerateCall
from models.messages import humans, json_content

OFFLINE_LABEL = "offline-rules"


class OfflineModel(CallableChatModel):
    """A deterministic stand-in for a chat model; subclasses implement ``respond``."""

    offline: bool = True

    @property
    def _llm_type(self) -> str:
        return OFFLINE_LABEL

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> OfflineModel:
        """Tools are known by name; binding changes nothing."""
        return self

    def respond(self, messages: list[BaseMessage]) -> AIMessage:
        """Produce the reply for ``messages``."""
        raise NotImplementedError

    def generate_for(self, call: GenerateCall) -> ChatResult:
        """The reply ``respond`` gives for the call's messages."""
        return ChatResult(generations=[ChatGeneration(message=self.respond(call.messages))])


def first_json_human(messages: list[BaseMessage]) -> dict[str, Any]:
    """The first human message whose content is a JSON object (the task facts)."""
    for message in humans(messages):
        data = json_content(message)
        if isinstance(data, dict):
            return data
    return {}
