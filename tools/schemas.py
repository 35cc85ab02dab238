"""Building blocks of the tools' argument models (each model lives in its tool's module).

Argument models validate what the model asked for before any backend is called. They reject
unknown arguments (so a misspelt filter fails loudly instead of being silently ignored),
timestamps that are not ISO-8601, and a time window whose `start` is after its `end` (which would
otherwise match nothing and read as a false "no hits" observation).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tools.backend import parse_timestamp

START = "Start of the time window, ISO-8601 (e.g. 2026-03-01T10:00:00Z); inclusive."
END = "End of the time window, ISO-8601 (e.g. 2026-03-01T10:30:00Z); inclusive."


def optional(description: str) -> Any:
    """An argument the model may leave out: None by default, which means not given."""
    return Field(default=None, description=description)


class ToolArgs(BaseModel):
    """Arguments of a tool: unknown ones are refused."""

    model_config = ConfigDict(extra="forbid")


class WindowArgs(ToolArgs):
    """Arguments with an optional `start`/`end` window."""

    start: str | None = optional(START)
    end: str | None = optional(END)

    @field_validator("start", "end")
    @classmethod
    def _iso_timestamp(cls, value: str | None) -> str | None:
        if value is not None:
            parse_timestamp(value)
        return value

    @model_validator(mode="after")
    def _ordered_window(self) -> WindowArgs:
        if self.start is not None and self.end is not None:
            if parse_timestamp(self.start) > parse_timestamp(self.end):
                raise ValueError(f"start {self.start} is after end {self.end}")
        return self
