"""``get_current_time``: the environment's current time (a helper: no refs, not evidence).

Its tool message shows the model its output (``{"now": ...}``), to anchor a time window.
"""

from __future__ import annotations

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import field_validator
from typing_extensions import TypedDict

from tools.schemas import ToolArgs, optional
from tools.spec import ModelArguments, ToolSpec

NAME = "get_current_time"


class GetCurrentTimeArgs(ToolArgs):
    """Arguments of `get_current_time`."""

    timezone: str | None = optional(
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


class TimeResult(TypedDict, total=False):
    """What a ``get_current_time`` invocation records: an ISO-8601 timestamp."""

    now: str


SPEC = ToolSpec(
    name=NAME,
    description="Get the current time, to anchor a time window such as 'the last hour'.",
    arguments=ModelArguments(GetCurrentTimeArgs),
    role="helper",
    output=TimeResult,
    message_output=("now",),
)
