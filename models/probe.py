"""What ``superbiz doctor`` learns about each role's model, in three small requests.

Per distinct model name (the roles sharing one are probed once): whether the endpoint answers and
lists the model, whether a request offering one tool gets a native tool call, a call written in
the reply text (``models.text_tool_calls``) or none, whether a ``response_format`` JSON schema is
accepted, and the generation speed in tokens/s. ``expectations`` turns that into what a diagnosis
will be like. Nothing here is retried: a doctor reports what it sees.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import openai

from models.text_tool_calls import text_tool_calls
from state.catalog import local_profile
from state.display import one_line
from state.records import JSONObject

ToolCalling = Literal["native", "text", "none", "unknown"]
SchemaSupport = Literal["accepted", "refused", "ignored", "unknown"]

PROBE_TOOL: JSONObject = {
    "type": "function",
    "function": {
        "name": "get_current_time",
        "description": "The current time in a timezone.",
        "parameters": {
            "type": "object",
            "properties": {"timezone": {"type": "string"}},
            "required": ["timezone"],
            "additionalProperties": False,
        },
    },
}
PROBE_SCHEMA: JSONObject = {
    "type": "object",
    "properties": {"status": {"type": "string", "enum": ["ok"]}},
    "required": ["status"],
    "additionalProperties": False,
}
TYPICAL_DIAGNOSIS_TOKENS = (9_000, 900)
"""Prompt and completion tokens of a typical model-mode diagnosis (``bench/local_model.py``)."""


@dataclass
class ModelProbe:
    """What the probe of one model found."""

    model: str
    roles: list[str]
    reachable: bool = False
    listed: bool | None = None
    """Whether the endpoint's model list names it (None: the endpoint lists no models)."""
    tool_calls: ToolCalling = "unknown"
    schema: SchemaSupport = "unknown"
    tokens_per_s: float | None = None
    problems: list[str] = field(default_factory=list)

    def as_json(self) -> JSONObject:
        """Plain data for ``doctor --json``."""
        return {
            "model": self.model,
            "roles": list(self.roles),
            "reachable": self.reachable,
            "listed": self.listed,
            "tool_calls": self.tool_calls,
            "json_schema": self.schema,
            "tokens_per_s": None if self.tokens_per_s is None else round(self.tokens_per_s, 1),
            "problems": list(self.problems),
            "expect": [*expectations(self)],
        }


def _said(exc: Exception) -> str:
    return one_line(str(getattr(exc, "message", None) or exc), 160)


def probe_model(
    client: openai.OpenAI, model: str, roles: list[str], *, max_tokens: int = 128
) -> ModelProbe:
    """Probe ``model`` through ``client`` (see the module docstring)."""
    found = ModelProbe(model=model, roles=roles)
    try:
        listed = [item.id for item in client.models.list()]
        found.reachable = True
        found.listed = model in listed
        if not found.listed:
            shown = ", ".join(listed[:5]) or "none"
            found.problems.append(f"the endpoint does not list model {model!r} (it lists {shown})")
    except openai.NotFoundError:
        found.reachable, found.listed = True, None
    except openai.APIConnectionError as exc:
        found.problems.append(f"the endpoint could not be reached: {_said(exc)}")
        return found
    except openai.APIError as exc:
        found.problems.append(f"listing models failed: {_said(exc)}")
    tool_request: dict[str, Any] = {
        "model": model,
        "messages": [
            {"role": "system", "content": "You are a helpful assistant with tools."},
            {"role": "user", "content": "What time is it in UTC? Call the tool to find out."},
        ],
        "tools": [PROBE_TOOL],
        "max_tokens": max_tokens,
        "temperature": 0,
    }
    try:
        started = time.monotonic()
        reply = client.chat.completions.create(**tool_request)
        seconds = time.monotonic() - started
        found.reachable = True
        message = reply.choices[0].message
        if message.tool_calls:
            found.tool_calls = "native"
        else:

            def check(name: str, args: JSONObject) -> str | None:
                return None if name == "get_current_time" else "unknown"

            text = text_tool_calls(message.content or "", check)
            found.tool_calls = "text" if text.calls else "none"
        completion = reply.usage.completion_tokens if reply.usage else 0
        if completion and seconds > 0:
            found.tokens_per_s = completion / seconds
    except openai.APIConnectionError as exc:
        found.problems.append(f"the endpoint could not be reached: {_said(exc)}")
        return found
    except openai.APIStatusError as exc:
        found.reachable = True
        found.problems.append(f"a request with one tool failed ({exc.status_code}: {_said(exc)})")
    except openai.APIError as exc:
        found.problems.append(f"a request with one tool failed: {_said(exc)}")
    schema_request: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": 'Reply with the JSON object {"status": "ok"}.'}],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "probe", "schema": PROBE_SCHEMA, "strict": False},
        },
        "max_tokens": 32,
        "temperature": 0,
    }
    try:
        reply = client.chat.completions.create(**schema_request)
        content = reply.choices[0].message.content or ""
        try:
            parsed = json.loads(content)
        except json.JSONDecodeError:
            parsed = None
        ok = isinstance(parsed, dict) and parsed.get("status") == "ok"
        found.schema = "accepted" if ok else "ignored"
    except openai.APIStatusError as exc:
        found.schema = "refused" if exc.status_code in (400, 422) else "unknown"
        if found.schema == "unknown":
            found.problems.append(f"a JSON-schema request failed ({exc.status_code})")
    except openai.APIError as exc:
        found.problems.append(f"a JSON-schema request failed: {_said(exc)}")
    return found


def expectations(found: ModelProbe) -> list[str]:
    """What a diagnosis with this model will be like, one line each."""
    lines: list[str] = []
    if not found.reachable:
        return ["no diagnosis can run in model mode until the endpoint answers"]
    if found.tool_calls == "native":
        lines.append("tool calls: native")
    elif found.tool_calls == "text":
        lines.append(
            "tool calls: written in the reply text, not as tool calls; they are read and run"
        )
    elif found.tool_calls == "none":
        lines.append(
            "this model does not call tools: its answers will cite nothing and say that no tool "
            "call was made; use a model that calls tools"
        )
    if found.schema == "accepted":
        lines.append("JSON schema: accepted (replies shaped by their schema)")
    elif found.schema in ("refused", "ignored"):
        lines.append(
            f"JSON schema: {found.schema}; replies are parsed as text and repaired when unreadable"
        )
    if found.tokens_per_s:
        prompt, completion = TYPICAL_DIAGNOSIS_TOKENS
        # Prompt tokens are read several times faster than completion tokens are written.
        estimate = completion / found.tokens_per_s + prompt / (found.tokens_per_s * 5)
        lines.append(
            f"speed: {found.tokens_per_s:.1f} tokens/s; a diagnosis takes about "
            f"{estimate / 60:.0f} min"
            + (
                "; set SUPERBIZ_MODEL_PROFILE=local (longer timeouts)"
                if (estimate > 120 or found.tokens_per_s < 30) and not local_profile()
                else ""
            )
        )
    return lines
