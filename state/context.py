"""Run settings for one diagnosis (the graph's ``context_schema``).

Environment variables fill the defaults; a value passed by the caller for a run always wins.
Every value, from a variable or from a caller, is checked by the rules of ``state.settings``:
an invalid one is a ``SettingsError`` naming what set it, the value and what is allowed, and an
unknown key is reported, never dropped.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from state.settings import SettingsError, as_any, check_settings, describe, env_value

ROLES = ("planner", "executor", "verifier", "composer")

Language = Literal["zh", "en"]
ComposerMode = Literal["template", "model"]

DEFAULTS: dict[str, object] = {
    "model": "gpt-4o-mini",
    "language": "zh",
    "composer_mode": "template",
    "max_tool_calls_per_round": 8,
    "executor_context_chars": 48_000,
    "tool_timeout_s": 30.0,
    "model_timeout_s": 120.0,
    "model_retries": 4,
    "diagnosis_deadline_s": 300.0,
    "max_model_calls": 40,
    "max_input_tokens": 500_000,
    "max_output_tokens": 50_000,
    "record_model_replies": True,
}
"""Defaults when neither the caller nor an environment variable sets a value."""


def default_of(name: str) -> Any:
    """The default of a setting: its environment variable (checked), else the built-in one.

    Raises:
        SettingsError: when the variable is set to a value the setting does not allow.
    """
    value = env_value(name)
    if value is not None:
        return value
    if name == "offline":
        return not os.environ.get("OPENAI_API_KEY")
    return DEFAULTS.get(name)


T = TypeVar("T")


def _settings(cls: type[T]) -> type[T]:
    """Give every field of ``cls`` its setting's default (``default_of``) and description."""
    for name in cls.__annotations__:
        setting = field(
            default_factory=functools.partial(default_of, name),
            metadata={"description": describe(name)},
        )
        setattr(cls, name, setting)
    return cls


@dataclass(kw_only=True, init=False)
@_settings
class Context:
    """Settings of one run; shown as a form in LangGraph Studio.

    ``Context(**values)`` checks every value and reports unknown keys (``SettingsError``, a
    ``ValueError``); settings not given take their defaults from the environment.
    """

    model: str
    planner_model: str | None
    executor_model: str | None
    verifier_model: str | None
    composer_model: str | None
    offline: bool
    language: Language
    composer_mode: ComposerMode
    max_tool_calls_per_round: int
    executor_context_chars: int
    tool_timeout_s: float
    model_timeout_s: float
    model_retries: int
    diagnosis_deadline_s: float
    max_model_calls: int
    max_input_tokens: int
    max_output_tokens: int
    record_model_replies: bool

    def __init__(self, **values: Any) -> None:
        """Check ``values`` and fill the other settings from the environment.

        Raises:
            SettingsError: listing every unknown key, wrong value and wrong variable.
        """
        problems: list[str] = []
        try:
            checked = check_settings(values)
        except SettingsError as exc:
            problems.extend(exc.problems)
            checked = {}
        for spec in dataclasses.fields(self):
            if spec.name in values:
                value = checked.get(spec.name)
            else:
                try:
                    value = default_of(spec.name)
                except SettingsError as exc:
                    problems.extend(exc.problems)
                    continue
            object.__setattr__(self, spec.name, as_any(value))
        if problems:
            raise SettingsError(problems)

    def model_for(self, role: str) -> str:
        """Model name for ``role``: its override, else the default model."""
        override = getattr(self, f"{role}_model", None)
        return override or self.model

    def settings(self) -> dict[str, object]:
        """Every setting as plain data (what a run was asked to do)."""
        return dataclasses.asdict(self)


def setting_names() -> tuple[str, ...]:
    """The names of the run settings, in form order."""
    return tuple(spec.name for spec in dataclasses.fields(Context))
