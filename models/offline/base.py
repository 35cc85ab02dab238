"""Base of the offline models: deterministic rules behind the chat-model interface.

They let the whole graph (prompts, tool ledger, Gatekeeper, verdict code, Composer) run with no
language model. They are labelled ``offline-rules`` everywhere and never claim to be an LLM.

They read a call as a chat model does: its messages, and the tools it offers (``bind_tools``).
A call that offers no tools asks for an answer, as a chat model called without tools can only
give one: the executor calls its model so once the round's tool budget is spent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.language_models import LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool

from models.chat_model import CallableChatModel, GenerateCall
from models.messages import humans, json_content

OFFLINE_LABEL = "offline-rules"


class OfflineModel(CallableChatModel):
    """A deterministic stand-in for a chat model; subclasses implement ``respond``."""

    offline: bool = True

    @property
    def _llm_type(self) -> str:
        return OFFLINE_LABEL

    def bind_tools(
        self, tools: Sequence[Any], **kwargs: Any
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """The model with ``tools`` offered to every call, by name (the rules know the tools)."""
        return self.bind(tools=[convert_to_openai_tool(tool)["function"]["name"] for tool in tools])

    def respond(self, messages: list[BaseMessage], *, tools: Sequence[str] = ()) -> AIMessage:
        """Produce the reply for ``messages`` in a call that offers ``tools`` (names)."""
        raise NotImplementedError

    def generate_for(self, call: GenerateCall) -> ChatResult:
        """The reply ``respond`` gives for the call's messages and offered tools."""
        reply = self.respond(call.messages, tools=offered_tools(call.kwargs))
        return ChatResult(generations=[ChatGeneration(message=reply)])


def offered_tools(kwargs: Mapping[str, Any]) -> tuple[str, ...]:
    """The names of the tools a call offers (its ``tools`` argument, from ``bind_tools``)."""
    found = kwargs.get("tools")
    return tuple(str(name) for name in found) if isinstance(found, list | tuple) else ()


def first_json_human(messages: list[BaseMessage]) -> dict[str, Any]:
    """The first human message whose content is a JSON object (the task facts)."""
    for message in humans(messages):
        data = json_content(message)
        if isinstance(data, dict):
            return data
    return {}
