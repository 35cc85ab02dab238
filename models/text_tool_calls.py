"""Tool calls a model wrote in its message text, recognised when the endpoint returned none.

Many local and small models (and the servers in front of them) do not emit native tool calls:
they write the call in the reply's text, as a fenced JSON block, between ``<tool_call>`` tags or
as the whole reply. ``text_tool_calls`` finds those calls, so the executor runs them like native
ones. What counts as a call, and nothing else:

- **where**: the body of a Markdown code fence (any or no language tag); the body of
  ``<tool_call>``, ``<tool_calls>``, ``<function_call>`` or ``<functioncall>`` tags (a missing
  closing tag at the end of the reply tolerated); a JSON value after ``[TOOL_CALLS]``; or the
  whole reply when it is one JSON value. JSON written inline in prose is never read.
- **what**: a JSON object, an array of objects, or ``{"tool_calls": [...]}``, where each object
  names a registered tool (``name``, ``tool``, ``tool_name`` or ``function``: a name or
  ``{"name", "arguments"}``) and gives its arguments as an object or a JSON string under
  ``arguments``, ``args``, ``parameters``, ``input`` or ``tool_input``; ``id`` and
  ``type: "function"`` may be present, any other key makes it something else.
- **checked**: the arguments are validated against the tool's schema (``tools.spec``). A call
  whose arguments fail is still recognised (it names a real tool and has the form of a call), and
  ``problem`` says why: the tools node runs it as an ``error`` invocation whose message the model
  reads and can correct, instead of the round ending on an unreadable answer.

A block in which any object fails these rules is left as text whole: the model then either
answers (and its reply is parsed as its final answer) or wrote something that only looks like a
call. The recognised blocks are cut out of the text; the prose around them is kept.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from langchain_core.messages import AIMessage, ToolCall

from models.messages import message_text
from state.json_shape import obj
from state.records import JSONObject, ToolCallSource
from tools.registry import spec_of
from tools.spec import ArgumentError

_FENCE = re.compile(r"```[ \t]*(?P<lang>[A-Za-z0-9_-]*)[ \t]*\r?\n(?P<body>.*?)```", re.DOTALL)
_TAGS = ("tool_call", "tool_calls", "function_call", "functioncall")
_TAGGED = re.compile(
    r"<(?P<tag>" + "|".join(_TAGS) + r")>(?P<body>.*?)(?:</(?P=tag)>|\Z)", re.DOTALL | re.IGNORECASE
)
_MISTRAL = re.compile(r"\[TOOL_CALLS\]\s*(?P<body>[\[{].*)", re.DOTALL)
_NAME_KEYS = ("name", "tool", "tool_name", "function")
_ARG_KEYS = ("arguments", "args", "parameters", "input", "tool_input")
_EXTRA_KEYS = frozenset({"id", "type"})
MAX_TEXT_CALLS = 16
"""Most calls read from one reply (the round's tool budget bounds what runs)."""

ToolCheck = Callable[[str, JSONObject], str | None]
"""``check(name, arguments)``: None when they are valid, else the problem (the tool is known)."""


@dataclass(frozen=True)
class TextCall:
    """One tool call read from a reply's text.

    Attributes:
        name: the registered tool it names.
        args: its arguments, as written.
        problem: why the arguments fail the tool's schema, or None when they are valid.
    """

    name: str
    args: JSONObject
    problem: str | None = None


@dataclass(frozen=True)
class TextCalls:
    """What ``text_tool_calls`` found: the calls, and the reply's text without them."""

    calls: list[TextCall]
    remaining: str


def registered_check(name: str, args: JSONObject) -> str | None:
    """The registry's check: ``unknown`` for a tool not registered, else the schema problem."""
    spec = spec_of(name)
    if spec is None:
        return "unknown"
    try:
        spec.arguments.validate(name, args)
    except ArgumentError as exc:
        return str(exc)
    return None


def _loads(text: str) -> object:
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return None


def _one_call(item: object, check: ToolCheck) -> TextCall | None:
    data = obj(item)
    if not data or not isinstance(item, dict):
        return None
    name_key = next((key for key in _NAME_KEYS if key in data), None)
    arg_key = next((key for key in _ARG_KEYS if key in data), None)
    if name_key is None:
        return None
    name_value = data[name_key]
    args_value: object = data[arg_key] if arg_key is not None else None
    if isinstance(name_value, dict) and name_key == "function":
        # OpenAI's own form: {"type": "function", "function": {"name", "arguments"}}
        if arg_key is not None:
            return None
        inner = _one_call(name_value, check)
        rest = set(data) - {name_key} - _EXTRA_KEYS
        return inner if inner is not None and not rest else None
    if not isinstance(name_value, str):
        return None
    if set(data) - {name_key, *([arg_key] if arg_key else []), *_EXTRA_KEYS}:
        return None
    if isinstance(args_value, str):
        args_value = _loads(args_value) if args_value.strip() else {}
    if args_value is None:
        args_value = {}
    if not isinstance(args_value, dict):
        return None
    name = name_value.strip()
    problem = check(name, args_value)
    if problem == "unknown":
        return None
    return TextCall(name=name, args=args_value, problem=problem)


def _calls_in(body: str, check: ToolCheck) -> list[TextCall] | None:
    """The calls a block holds, or None when it is not wholly calls."""
    value = _loads(body.strip())
    if isinstance(value, dict) and set(value) == {"tool_calls"}:
        value = value["tool_calls"]
    items = value if isinstance(value, list) else [value]
    if not items:
        return None
    calls = [_one_call(item, check) for item in items]
    if any(call is None for call in calls):
        return None
    return [call for call in calls if call is not None]


def _blocks(text: str) -> Iterator[tuple[int, int, str]]:
    """Each candidate block: its span in ``text`` and its body."""
    for match in _TAGGED.finditer(text):
        body = match.group("body")
        fenced = _FENCE.search(body)
        yield match.start(), match.end(), fenced.group("body") if fenced else body
    mistral = _MISTRAL.search(text)
    if mistral is not None:
        try:
            _, length = json.JSONDecoder().raw_decode(mistral.group("body"))
        except (json.JSONDecodeError, RecursionError):
            length = len(mistral.group("body"))
        start = mistral.start("body")
        yield mistral.start(), start + length, text[start : start + length]
    for match in _FENCE.finditer(text):
        yield match.start(), match.end(), match.group("body")


def text_tool_calls(text: str, check: ToolCheck = registered_check) -> TextCalls:
    """The tool calls written in ``text`` (see the module docstring), and the rest of the text.

    Args:
        text: the reply's text.
        check: tells a known tool and validates its arguments (default: the tool registry).
    """
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        whole = _calls_in(stripped, check)
        if whole is not None:
            return TextCalls(calls=whole[:MAX_TEXT_CALLS], remaining="")
    found: list[tuple[int, int, list[TextCall]]] = []
    for start, end, body in _blocks(text):
        if any(start < done_end and done_start < end for done_start, done_end, _ in found):
            continue  # a fence inside tags (or tags inside a fence) is read once
        calls = _calls_in(body, check)
        if calls is not None:
            found.append((start, end, calls))
    found.sort(key=lambda item: item[0])
    calls = [call for _, _, block in found for call in block][:MAX_TEXT_CALLS]
    remaining, cursor = [], 0
    for start, end, _ in found:
        remaining.append(text[cursor:start])
        cursor = end
    remaining.append(text[cursor:])
    return TextCalls(calls=calls, remaining="".join(remaining).strip() if found else text)


SOURCE_KEY = "tool_call_source"
"""``response_metadata`` key of a reply whose tool calls were read from its text (``"text"``) or
run from its plan step (``"plan"``)."""


def tool_call_source(reply: AIMessage) -> ToolCallSource | None:
    """Where a reply's tool calls came from: ``native``, ``text`` or ``plan``; None for none."""
    if not (reply.tool_calls or reply.invalid_tool_calls):
        return None
    found = reply.response_metadata.get(SOURCE_KEY)
    return "text" if found == "text" else "plan" if found == "plan" else "native"


_STEP = re.compile(r"^\s*(?:\d+[.)]\s*)?(?P<tool>[A-Za-z_][A-Za-z0-9_]*)\s*(?P<args>\{.*\})\s*$")


def step_call(step: str, check: ToolCheck = registered_check) -> TextCall | None:
    """The tool call a plan step writes out (``tool {json arguments}``), when it is a valid one.

    A step in prose, naming an unknown tool or with arguments its schema refuses gives None: only
    a call that would run as written is read.
    """
    match = _STEP.match(step)
    if match is None:
        return None
    try:
        args = json.loads(match.group("args"))
    except json.JSONDecodeError:
        return None
    if not isinstance(args, dict) or check(match.group("tool"), args) is not None:
        return None
    return TextCall(name=match.group("tool"), args=args, problem=None)


def planned_call(reply: AIMessage, step: str, call_id: str) -> AIMessage | None:
    """``reply`` (which made no call) carrying the call ``step`` writes out, marked ``plan``.

    None when the step is no valid call (``step_call``). The model's own reply is recorded as it
    was; this message is what the conversation and the tools node read.
    """
    call = step_call(step)
    if call is None:
        return None
    return AIMessage(
        content=reply.content,
        tool_calls=[ToolCall(name=call.name, args=call.args, id=call_id, type="tool_call")],
        id=reply.id,
        usage_metadata=reply.usage_metadata,
        response_metadata={**reply.response_metadata, SOURCE_KEY: "plan"},
    )


def read_text_calls(
    reply: AIMessage, id_prefix: str, check: ToolCheck = registered_check
) -> AIMessage:
    """The reply with the tool calls written in its text made into tool calls.

    A reply that has native tool calls (well formed or not), or none in its text, is returned as
    it is. Otherwise its content becomes the prose around the calls, and each call gets the id
    ``<id_prefix>-<n>`` (stable: a node re-run after a crash gives the same ids).
    """
    if reply.tool_calls or reply.invalid_tool_calls:
        return reply
    found = text_tool_calls(message_text(reply), check)
    if not found.calls:
        return reply
    return AIMessage(
        content=found.remaining,
        tool_calls=[
            ToolCall(name=call.name, args=call.args, id=f"{id_prefix}-{index}", type="tool_call")
            for index, call in enumerate(found.calls, start=1)
        ],
        id=reply.id,
        usage_metadata=reply.usage_metadata,
        response_metadata={**reply.response_metadata, SOURCE_KEY: "text"},
    )
