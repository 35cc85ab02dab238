"""Scripted chat models: replay fixed replies per role (scenario evaluation and tests).

Each role gets its own iterator of replies. A reply is a string, a JSON object (sent as its JSON
text), or for the executor ``{"tool_calls": [{"name", "args"}]}`` / ``{"content": ...}``. Tool
calls get fixed ids in script order. A role that runs out of replies raises ``ScriptExhausted``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from functools import partial
from typing import Any

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatResult
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool

from models.budget import GetModel
from models.chat_model import CallableChatModel, GenerateCall
from state.context import Context


class ScriptExhausted(RuntimeError):
    """A scripted role was called more often than its script has replies."""


class ScriptedChatModel(CallableChatModel, GenericFakeChatModel):
    """``GenericFakeChatModel`` that accepts tools and never streams."""

    role: str = "model"

    def bind_tools(
        self, tools: Sequence[Any], **kwargs: Any
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """The model with ``tools`` offered to every call, by name.

        The script already says which calls to make; the offered tools reach ``_generate`` as
        its ``tools`` argument, where a test can see which calls offered tools.
        """
        return self.bind(tools=[convert_to_openai_tool(tool)["function"]["name"] for tool in tools])

    def generate_for(self, call: GenerateCall) -> ChatResult:
        """The next scripted reply.

        Raises:
            ScriptExhausted: when the script has no more replies for this role.
        """
        try:
            return call.run(partial(GenericFakeChatModel._generate, self))
        except StopIteration:
            raise ScriptExhausted(
                f"the script has no more {self.role} replies (called once too often)"
            ) from None


def to_message(reply: Any, *, prefix: str, counter: Iterator[int]) -> AIMessage:
    """Turn one scripted reply into an ``AIMessage`` (tool calls get fixed ids)."""
    if isinstance(reply, dict):
        if "tool_calls" in reply:
            calls = [
                {
                    "name": str(call["name"]),
                    "args": dict(call.get("args") or {}),
                    "id": str(call.get("id") or f"{prefix}-{next(counter)}"),
                    "type": "tool_call",
                }
                for call in reply["tool_calls"]
            ]
            return AIMessage(content=str(reply.get("content") or ""), tool_calls=calls)
        if set(reply) == {"content"}:
            reply = reply["content"]
    if not isinstance(reply, str):
        reply = json.dumps(reply, ensure_ascii=False)
    return AIMessage(content=reply)


def scripted_models(replies: dict[str, list[Any]]) -> GetModel:
    """``get_model`` whose role models replay ``replies[role]`` in order."""
    counter = iter(range(1, 1_000_000))
    models: dict[str, BaseChatModel] = {}
    for role, items in replies.items():
        messages = [to_message(item, prefix="call", counter=counter) for item in items]
        models[role] = ScriptedChatModel(messages=iter(messages), role=role, disable_streaming=True)

    def get_model(role: str, ctx: Context) -> BaseChatModel:
        if role not in models:
            raise ScriptExhausted(f"the script has no {role} replies")
        return models[role]

    return get_model
