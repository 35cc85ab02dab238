"""Run settings for one diagnosis (the graph's ``context_schema``), each declared once, here.

Every field of ``Context`` is a run setting's one declaration (``run_setting``): its type,
variable, rule, default and description. The rules (``RULES``), the form LangGraph Studio shows,
the messages and ``config show`` come from these fields, and the README's table is checked
against them.

Environment variables fill the defaults; a value passed by the caller for a run always wins.
Every value, from a variable or from a caller, is checked by the field's rule: an invalid one
is a ``SettingsError`` naming what set it, the value and what is allowed, and an unknown key is
reported, never dropped.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from state import configuration
from state.catalog import (
    LOCAL_DIAGNOSIS_DEADLINE_S,
    LOCAL_MODEL_TIMEOUT_S,
    local_profile,
    models_configured,
)
from state.settings import (
    Check,
    Derived,
    RunCheck,
    Setting,
    SettingsError,
    as_any,
    check_entries,
    describe,
    parse_value,
)

ROLES = ("planner", "executor", "verifier", "composer")

Language = Literal["zh", "en"]
ComposerMode = Literal["template", "model"]


@dataclass(frozen=True)
class _Declared:
    """A run setting as written in the class body; ``_settings`` names it."""

    variable: str
    check: Check
    default: object
    description: str
    per_request: bool
    shown_default: str | None


def run_setting(
    variable: str,
    check: Check,
    default: object,
    description: str,
    *,
    per_request: bool = False,
    shown_default: str | None = None,
) -> Any:
    """Declare a run setting (a field of ``Context``).

    Args:
        variable: The environment variable that sets its default.
        check: Its rule (``RunCheck``).
        default: The value when neither a caller nor the variable sets it (a ``Derived``
            default is computed).
        description: One sentence, shown in LangGraph Studio's form.
        per_request: Whether an HTTP API request may choose it.
        shown_default: The default as the README states it, when not the value written out.
    """
    return _Declared(variable, check, default, description, per_request, shown_default)


def default_of(setting: Setting) -> Any:
    """The default of a run setting: its environment variable (checked), else its default.

    Raises:
        SettingsError: when the variable is set to a value the setting does not allow.
    """
    return configuration.value(setting)


T = TypeVar("T")


def _settings(cls: type[T]) -> type[T]:
    """Make every declared field a dataclass field with its default and description."""
    for name in cls.__annotations__:
        declared = cls.__dict__[name]
        if not isinstance(declared, _Declared):
            raise TypeError(f"Context.{name} must be declared with run_setting(...)")
        setting = Setting(
            name,
            declared.variable,
            declared.check,
            declared.description,
            default=declared.default,
            run=True,
            per_request=declared.per_request,
            shown_default=declared.shown_default,
        )
        spec = field(
            default_factory=functools.partial(default_of, setting),
            metadata={"description": describe(setting), "setting": setting},
        )
        setattr(cls, name, spec)
    return cls


def _offline_by_default(sources: configuration.Sources) -> bool:
    return not models_configured(sources)


def _request_timeout(sources: configuration.Sources) -> float:
    return LOCAL_MODEL_TIMEOUT_S if local_profile(sources) else 120.0


def _diagnosis_deadline(sources: configuration.Sources) -> float:
    return LOCAL_DIAGNOSIS_DEADLINE_S if local_profile(sources) else 300.0


def _role_model(role: str) -> Any:
    return run_setting(
        f"SUPERBIZ_{role.upper()}_MODEL",
        RunCheck("optional_text"),
        None,
        f"{role.capitalize()} model override.",
        shown_default="SUPERBIZ_MODEL",
    )


@dataclass(kw_only=True, init=False)
@_settings
class Context:
    """Settings of one run; shown as a form in LangGraph Studio.

    ``Context(**values)`` checks every value and reports unknown keys (``SettingsError``, a
    ``ValueError``); settings not given take their defaults from the environment.
    """

    model: str = run_setting(
        "SUPERBIZ_MODEL",
        RunCheck("text"),
        "gpt-4o-mini",
        "Default chat model name for every role.",
    )
    planner_model: str | None = _role_model("planner")
    executor_model: str | None = _role_model("executor")
    verifier_model: str | None = _role_model("verifier")
    composer_model: str | None = _role_model("composer")
    offline: bool = run_setting(
        "SUPERBIZ_OFFLINE",
        RunCheck("flag"),
        Derived(_offline_by_default, "on when OPENAI_API_KEY is not set"),
        "Deterministic rule-based planner, executor and verifier; no model is called. On by "
        "default when OPENAI_API_KEY is not set.",
        per_request=True,
    )
    language: Language = run_setting(
        "SUPERBIZ_LANGUAGE",
        RunCheck("choice", choices=("zh", "en")),
        "zh",
        "Answer language.",
        per_request=True,
    )
    composer_mode: ComposerMode = run_setting(
        "SUPERBIZ_COMPOSER_MODE",
        RunCheck("choice", choices=("template", "model")),
        "template",
        "template (fixed safe template) or model (checked model text).",
        per_request=True,
    )
    max_tool_calls_per_round: int = run_setting(
        "SUPERBIZ_MAX_TOOL_CALLS",
        RunCheck("count", minimum=1),
        8,
        "Tool calls the executor may make in one round.",
        per_request=True,
    )
    executor_context_chars: int = run_setting(
        "SUPERBIZ_EXECUTOR_CONTEXT_CHARS",
        RunCheck("count", minimum=4000),
        48_000,
        "Characters the executor model reads per turn at most; tool results it has seen are "
        "shortened to their id, raw paths and summary line.",
    )
    tool_timeout_s: float = run_setting(
        "SUPERBIZ_TOOL_TIMEOUT_S",
        RunCheck("seconds"),
        30.0,
        "Seconds one tool call may take before it is an error.",
    )
    model_timeout_s: float = run_setting(
        "SUPERBIZ_MODEL_TIMEOUT_S",
        RunCheck("seconds"),
        Derived(_request_timeout, "120; 600 with SUPERBIZ_MODEL_PROFILE=local"),
        "Seconds one model request may take.",
    )
    model_retries: int = run_setting(
        "SUPERBIZ_MODEL_RETRIES",
        RunCheck("count", zero_means="no retry"),
        4,
        "Retries of a model request after a rate limit, server error, timeout or lost connection.",
    )
    diagnosis_deadline_s: float = run_setting(
        "SUPERBIZ_DIAGNOSIS_DEADLINE_S",
        RunCheck("seconds"),
        Derived(_diagnosis_deadline, "300; 1800 with SUPERBIZ_MODEL_PROFILE=local"),
        "Seconds a diagnosis may spend on model calls and their retries.",
    )
    max_model_calls: int = run_setting(
        "SUPERBIZ_MAX_MODEL_CALLS",
        RunCheck("count", minimum=1),
        40,
        "Model calls one diagnosis may make.",
    )
    max_input_tokens: int = run_setting(
        "SUPERBIZ_MAX_INPUT_TOKENS",
        RunCheck("count", zero_means="no limit"),
        500_000,
        "Prompt tokens one diagnosis may send (as the endpoint reports them).",
    )
    max_output_tokens: int = run_setting(
        "SUPERBIZ_MAX_OUTPUT_TOKENS",
        RunCheck("count", zero_means="no limit"),
        50_000,
        "Completion tokens one diagnosis may receive (as the endpoint reports them).",
    )
    record_model_replies: bool = run_setting(
        "SUPERBIZ_RECORD_MODEL_REPLIES",
        RunCheck("flag"),
        True,
        "Keep each model reply (text, tool calls) in the audit record, so the diagnosis can be "
        "exported as a replayable scenario; off: only role, round and usage are kept.",
    )

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
                    value = default_of(spec.metadata["setting"])
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


RULES: tuple[Setting, ...] = tuple(spec.metadata["setting"] for spec in dataclasses.fields(Context))
"""Every run setting, in form order."""
BY_NAME: dict[str, Setting] = {setting.name: setting for setting in RULES}
BY_VARIABLE: dict[str, Setting] = {setting.variable: setting for setting in RULES}
REQUEST_SETTINGS: tuple[str, ...] = tuple(s.name for s in RULES if s.per_request)
"""The run settings an HTTP API request may choose; the others are the server's."""


def setting_names() -> tuple[str, ...]:
    """The names of the run settings, in form order."""
    return tuple(BY_NAME)


def check_settings(
    values: Mapping[str, object],
    *,
    allowed: tuple[str, ...] | None = None,
    label: Callable[[str], str] | None = None,
) -> dict[str, object]:
    """Check typed run settings (a request body, a LangGraph context); report every problem.

    Args:
        values: setting name -> value.
        allowed: the names that may be set here (default: every run setting).
        label: how a name is shown in messages (default: the name itself).

    Raises:
        SettingsError: listing every unknown key and every wrong value.
    """
    return check_entries(values, BY_NAME, allowed=allowed, label=label)


def parse_option(name: str, text: str, option: str) -> object:
    """The checked value of a run setting given as a command-line word.

    Raises:
        SettingsError: naming ``option``, the text and what is allowed.
    """
    return parse_value(BY_NAME[name], text, option)


def env_value(name: str, environ: Mapping[str, str] | None = None) -> object | None:
    """The checked value of run setting ``name`` from its variable (None when unset).

    Raises:
        SettingsError: naming the variable, its value and the allowed values.
    """
    setting = BY_NAME[name]
    given = configuration.Sources(environ).given(setting)
    return None if given is None else setting.read(given)


def check_environment(environ: Mapping[str, str] | None = None) -> list[str]:
    """Every problem with the run-setting variables of an environment (empty when all are fine)."""
    problems: list[str] = []
    for setting in RULES:
        try:
            env_value(setting.name, environ)
        except SettingsError as exc:
            problems.extend(exc.problems)
    return problems
