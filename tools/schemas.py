"""Argument models of the four tools, and the tool specs handed to the executor model.

The models validate what the model asked for before any backend is called. They reject unknown
arguments (so a misspelt filter fails loudly instead of being silently ignored), timestamps that
are not ISO-8601, and a time window whose `start` is after its `end` (which would otherwise match
nothing and read as a false "no hits" observation).
"""

from __future__ import annotations

import copy
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from state.json_shape import objects
from state.records import TOOL_NAMES, JSONObject
from tools.backend import parse_timestamp

_START = "Start of the time window, ISO-8601 (e.g. 2026-03-01T10:00:00Z); inclusive."
_END = "End of the time window, ISO-8601 (e.g. 2026-03-01T10:30:00Z); inclusive."


def _optional(description: str) -> Any:
    """An argument the model may leave out: None by default, which means not given."""
    return Field(default=None, description=description)


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _WindowArgs(_Args):
    """Arguments with an optional `start`/`end` window."""

    start: str | None = _optional(_START)
    end: str | None = _optional(_END)

    @field_validator("start", "end")
    @classmethod
    def _iso_timestamp(cls, value: str | None) -> str | None:
        if value is not None:
            parse_timestamp(value)
        return value

    @model_validator(mode="after")
    def _ordered_window(self) -> _WindowArgs:
        if self.start is not None and self.end is not None:
            if parse_timestamp(self.start) > parse_timestamp(self.end):
                raise ValueError(f"start {self.start} is after end {self.end}")
        return self


class QueryLogsArgs(_WindowArgs):
    """Arguments of `query_logs`."""

    service: str | None = _optional("Only log lines of this service (exact name).")
    query: str | None = _optional(
        "Only log lines whose message contains this text (case-insensitive)."
    )
    level: str | None = _optional("Only log lines of this level, e.g. ERROR, WARN, INFO.")
    limit: int = Field(
        default=20, ge=1, le=100, description="Return at most this many lines (1-100)."
    )


class QueryMetricsArgs(_WindowArgs):
    """Arguments of `query_metrics`."""

    service: str | None = _optional("Only alerts and series of this service (exact name).")
    alert: str | None = _optional("Only alerts whose name contains this text (case-insensitive).")
    promql: str | None = _optional(
        "PromQL expression; series whose metric name appears in it are returned."
    )


class LookupKnowledgeArgs(_Args):
    """Arguments of `lookup_knowledge`."""

    query: str = Field(
        min_length=1, description="Keywords to look for in runbooks and past incidents."
    )
    top_k: int = Field(
        default=3, ge=1, le=10, description="Return at most this many documents (1-10)."
    )


class GetCurrentTimeArgs(_Args):
    """Arguments of `get_current_time`."""

    timezone: str | None = _optional(
        "IANA timezone name for the answer, e.g. Asia/Shanghai; UTC if omitted."
    )

    @field_validator("timezone")
    @classmethod
    def _known_timezone(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                ZoneInfo(value)
            except (ZoneInfoNotFoundError, ValueError):
                raise ValueError(
                    f"unknown timezone {value!r}; use an IANA name such as UTC"
                ) from None
        return value


ARGUMENT_MODELS: dict[str, type[BaseModel]] = {
    "query_logs": QueryLogsArgs,
    "query_metrics": QueryMetricsArgs,
    "lookup_knowledge": LookupKnowledgeArgs,
    "get_current_time": GetCurrentTimeArgs,
}
"""The argument model of each tool, by tool name."""

TOOL_DESCRIPTIONS: dict[str, str] = {
    "query_logs": (
        "Search log lines of the services. Filters combine: service (exact), level, text in the "
        "message, and a time window. Returns at most `limit` matching lines with how many "
        "matched in total; a real log source searches the last hour unless start and end say "
        "otherwise (24 h at most) and returns the newest lines first."
    ),
    "query_metrics": (
        "Get alerts (firing or resolved) and metric series summaries (min, max, last) for a "
        "service, an alert name, or a PromQL expression."
    ),
    "lookup_knowledge": (
        "Search runbooks and past-incident postmortems by keywords. Guidance only: it describes "
        "what to check or do, never what is happening now."
    ),
    "get_current_time": "Get the current time, to anchor a time window such as 'the last hour'.",
}
"""The description of each tool shown to the model."""


def _strip_titles(node: Any) -> Any:
    """Removes pydantic's `title` keys, which only add noise to a tool spec."""
    if isinstance(node, dict):
        return {k: _strip_titles(v) for k, v in node.items() if k != "title"}
    if isinstance(node, list):
        return [_strip_titles(v) for v in node]
    return node


def _collapse_optional(prop: dict[str, Any]) -> dict[str, Any]:
    """Turns `anyOf: [{type: X}, {type: null}]` into `type: X` (omitting it means null)."""
    variants = objects(prop.get("anyOf"))
    if not variants:
        return prop
    non_null = [v for v in variants if v.get("type") != "null"]
    if len(non_null) != 1 or len(non_null) == len(variants):
        return prop
    collapsed = {k: v for k, v in prop.items() if k != "anyOf"}
    collapsed.update(non_null[0])
    if collapsed.get("default", "") is None:
        del collapsed["default"]
    return collapsed


_PARAMETER_ORDER = {
    name: index
    for index, name in enumerate(
        ["service", "query", "level", "alert", "promql", "start", "end", "limit", "top_k"]
    )
}


def parameters_schema(tool_name: str) -> JSONObject:
    """Builds the JSON schema of one tool's parameters.

    Args:
        tool_name: One of the four tool names.

    Returns:
        An object schema with `properties`, `required` and `additionalProperties: false`.

    Raises:
        KeyError: When the tool is unknown.
    """
    schema = _strip_titles(copy.deepcopy(ARGUMENT_MODELS[tool_name].model_json_schema()))
    raw = schema.get("properties", {})
    ordered = sorted(raw, key=lambda name: _PARAMETER_ORDER.get(name, len(_PARAMETER_ORDER)))
    properties: JSONObject = {name: _collapse_optional(raw[name]) for name in ordered}
    return {
        "type": "object",
        "properties": properties,
        "required": list(schema.get("required", [])),
        "additionalProperties": False,
    }


def tool_specs() -> list[JSONObject]:
    """Returns OpenAI-style function tool specs of the four tools, for `bind_tools`.

    Returns:
        One `{"type": "function", "function": {"name", "description", "parameters"}}` per tool,
        evidence tools first, in a fixed order.
    """
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": TOOL_DESCRIPTIONS[name],
                "parameters": parameters_schema(name),
            },
        }
        for name in TOOL_NAMES
    ]
