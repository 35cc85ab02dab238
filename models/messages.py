"""Reading LangChain messages: their kinds and contents are narrowed here, once.

A conversation is a list of messages of several kinds, and a message's ``content`` is a string or
a list of blocks. The nodes read them through these functions instead of checking kinds and
content shapes where they use them: the model replies, the human question and task facts, the
executor's final reply, the tool results as the JSON they hold, and the tool calls of a reply in
the form the executor acts on (a call whose arguments were not JSON made readable,
``readable_calls``) or as one line of text (``render_call``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, cast

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolCall

from state.display import clean_text, clean_value
from state.json_shape import obj
from tools.render import format_value

INVALID_ARGUMENTS = "__invalid_arguments__"
"""Argument key of a tool call whose arguments were not a JSON object (the raw text is its
value); the tools node records it as an ``error`` invocation the executor can read."""


def message_text(message: BaseMessage | None) -> str:
    """Plain text of a message, joining text blocks of list content.

    Lone surrogates and NUL characters are replaced (``state.display``): a model reply or a
    question may carry them, and they would break the payload, the checkpoint or the database.
    """
    return "" if message is None else clean_text(message.text)


def content_chars(messages: Sequence[BaseMessage]) -> int:
    """Characters of the content a model receives (texts and tool-call arguments)."""
    total = 0
    for message in messages:
        content = message.content
        if isinstance(content, str):
            total += len(content)
        else:
            for block in content:
                total += len(block) if isinstance(block, str) else len(json.dumps(block))
        for call in getattr(message, "tool_calls", None) or []:
            total += len(call["name"]) + len(json.dumps(call.get("args") or {}, ensure_ascii=False))
    return total


def json_content(message: BaseMessage) -> object:
    """The JSON value a message's text content holds, or None (list content, not JSON)."""
    if not isinstance(message.content, str):
        return None
    try:
        return json.loads(message.content)
    except json.JSONDecodeError:
        return None


def as_reply(message: BaseMessage) -> AIMessage:
    """A model's answer as a reply: an ``AIMessage`` as it is, another message's content and id.

    A chat model answers with an ``AIMessage``; a stand-in that answers otherwise gives a reply
    with no tool calls.
    """
    return message if isinstance(message, AIMessage) else AIMessage(message.content, id=message.id)


def replies(messages: Sequence[BaseMessage]) -> list[AIMessage]:
    """The model replies among ``messages``, in order."""
    return [message for message in messages if isinstance(message, AIMessage)]


def last_reply(messages: Sequence[BaseMessage]) -> AIMessage | None:
    """The last message when it is a model reply, else None."""
    found = replies(messages[-1:])
    return found[0] if found else None


def final_reply(messages: Sequence[BaseMessage]) -> AIMessage | None:
    """The executor's final reply: the last message when it is a reply without tool calls."""
    last = last_reply(messages)
    return last if last is not None and not last.tool_calls else None


def final_text(messages: Sequence[BaseMessage]) -> str:
    """The text of the executor's final reply (raw), or '' when it gave none."""
    return message_text(final_reply(messages))


def humans(messages: Sequence[BaseMessage]) -> list[HumanMessage]:
    """The human messages among ``messages``, in order."""
    return [message for message in messages if isinstance(message, HumanMessage)]


def last_human(messages: Sequence[BaseMessage]) -> HumanMessage | None:
    """The last human message (the question), if there is one."""
    found = humans(messages)
    return found[-1] if found else None


def readable_calls(reply: AIMessage) -> list[ToolCall]:
    """The reply's tool calls, each malformed one made into one the tools node answers.

    langchain keeps a call whose arguments are not valid JSON apart (``invalid_tool_calls``);
    such a call keeps its id and name, and its arguments become
    ``{INVALID_ARGUMENTS: <the raw text>}``. Lone surrogates and NUL characters in a call's
    name and arguments are replaced (``state.display``), as in a reply's text.
    """
    calls = [
        ToolCall(
            name=clean_text(call["name"]),
            args=cast(dict[str, Any], clean_value(call["args"])),
            id=call["id"],
            type="tool_call",
        )
        for call in reply.tool_calls
    ]
    for index, bad in enumerate(reply.invalid_tool_calls):
        calls.append(
            ToolCall(
                name=clean_text(str(bad.get("name") or "unnamed")),
                args={INVALID_ARGUMENTS: clean_text(str(bad.get("args") or "")[:2000])},
                id=str(bad.get("id") or f"invalid-{index}"),
                type="tool_call",
            )
        )
    return calls


def render_call(name: str, args: object) -> str:
    """A tool call on one line, its arguments sorted: ``query_logs level=ERROR service=x``."""
    items = sorted(obj(args).items())
    return " ".join([name, *(f"{key}={format_value(value)}" for key, value in items)])
