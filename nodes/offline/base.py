"""Base of the offline models: deterministic rules behind the chat-model interface.

They let the whole graph (prompts, tool ledger, Gatekeeper, verdict code, Composer) run with no
language model. They are labelled ``offline-rules`` everywhere and never claim to be an LLM.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult

OFFLINE_LABEL = "offline-rules"


class OfflineModel(BaseChatModel):
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

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self.respond(messages))])


def first_json_human(messages: list[BaseMessage]) -> dict[str, Any]:
    """The first human message whose content is a JSON object (the task facts)."""
    for message in messages:
        if isinstance(message, HumanMessage) and isinstance(message.content, str):
            try:
                data = json.loads(message.content)
            except json.JSONDecodeError:
                continue
            if isinstance(data, dict):
                return data
    return {}
