"""The rules of the run settings, applied once wherever settings enter.

Every entry point (environment variables, command-line options, HTTP API request bodies and the
LangGraph run context or config) checks its values with these rules, so a wrong value gets the
same message everywhere: what was set (the variable, option or key), the value, and what is
allowed. Unknown keys are reported, with the closest known name.

``Context`` (``state/context.py``) is built from these rules; nothing here knows a tool, a role
or the wiring.
"""

from __future__ import annotations

import difflib
import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from state import json_shape

Kind = Literal["text", "optional_text", "flag", "choice", "count", "seconds"]

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


class SettingsError(ValueError):
    """One or more run settings are invalid; ``problems`` holds one sentence per setting."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class Rule:
    """What one run setting accepts."""

    name: str
    """The ``Context`` field (and the key in a request body or LangGraph context)."""
    variable: str
    """The environment variable that sets its default."""
    kind: Kind
    description: str
    choices: tuple[str, ...] = ()
    minimum: int = 0
    """Smallest allowed ``count``."""
    zero_means: str = ""
    """For a ``count`` whose minimum is 0: what 0 means (e.g. no limit)."""

    @property
    def allowed(self) -> str:
        """What the rule allows, as the end of the sentence "... it must be ..."."""
        if self.kind == "choice":
            return " or ".join(repr(choice) for choice in self.choices)
        if self.kind == "flag":
            return "true or false (" + "/".join(TRUE_WORDS) + " or " + "/".join(FALSE_WORDS) + ")"
        if self.kind == "count":
            extra = f" (0: {self.zero_means})" if self.zero_means else ""
            return f"a whole number of at least {self.minimum}{extra}"
        if self.kind == "seconds":
            return "a number of seconds greater than 0"
        if self.kind == "optional_text":
            return "a non-empty model name, or nothing for the default"
        return "a non-empty text"


RULES: tuple[Rule, ...] = (
    Rule("model", "SUPERBIZ_MODEL", "text", "Default chat model name for every role."),
    *(
        Rule(
            f"{role}_model",
            f"SUPERBIZ_{role.upper()}_MODEL",
            "optional_text",
            f"{role.capitalize()} model override.",
        )
        for role in ("planner", "executor", "verifier", "composer")
    ),
    Rule(
        "offline",
        "SUPERBIZ_OFFLINE",
        "flag",
        "Deterministic rule-based planner, executor and verifier; no model is called. On by "
        "default when OPENAI_API_KEY is not set.",
    ),
    Rule("language", "SUPERBIZ_LANGUAGE", "choice", "Answer language.", choices=("zh", "en")),
    Rule(
        "composer_mode",
        "SUPERBIZ_COMPOSER_MODE",
        "choice",
        "template (fixed safe template) or model (checked model text).",
        choices=("template", "model"),
    ),
    Rule(
        "max_tool_calls_per_round",
        "SUPERBIZ_MAX_TOOL_CALLS",
        "count",
        "Tool calls the executor may make in one round.",
        minimum=1,
    ),
    Rule(
        "executor_context_chars",
        "SUPERBIZ_EXECUTOR_CONTEXT_CHARS",
        "count",
        "Characters the executor model reads per turn at most; tool results it has seen are "
        "shortened to their id, raw paths and summary line.",
        minimum=4000,
    ),
    Rule(
        "tool_timeout_s",
        "SUPERBIZ_TOOL_TIMEOUT_S",
        "seconds",
        "Seconds one tool call may take before it is an error.",
    ),
    Rule(
        "model_timeout_s",
        "SUPERBIZ_MODEL_TIMEOUT_S",
        "seconds",
        "Seconds one model request may take.",
    ),
    Rule(
        "model_retries",
        "SUPERBIZ_MODEL_RETRIES",
        "count",
        "Retries of a model request after a rate limit, server error, timeout or lost connection.",
        zero_means="no retry",
    ),
    Rule(
        "diagnosis_deadline_s",
        "SUPERBIZ_DIAGNOSIS_DEADLINE_S",
        "seconds",
        "Seconds a diagnosis may spend on model calls and their retries.",
    ),
    Rule(
        "max_model_calls",
        "SUPERBIZ_MAX_MODEL_CALLS",
        "count",
        "Model calls one diagnosis may make.",
        minimum=1,
    ),
    Rule(
        "max_input_tokens",
        "SUPERBIZ_MAX_INPUT_TOKENS",
        "count",
        "Prompt tokens one diagnosis may send (as the endpoint reports them).",
        zero_means="no limit",
    ),
    Rule(
        "max_output_tokens",
        "SUPERBIZ_MAX_OUTPUT_TOKENS",
        "count",
        "Completion tokens one diagnosis may receive (as the endpoint reports them).",
        zero_means="no limit",
    ),
    Rule(
        "record_model_replies",
        "SUPERBIZ_RECORD_MODEL_REPLIES",
        "flag",
        "Keep each model reply (text, tool calls) in the audit record, so the diagnosis can be "
        "exported as a replayable scenario; off: only role, round and usage are kept.",
    ),
)
BY_NAME: dict[str, Rule] = {rule.name: rule for rule in RULES}
BY_VARIABLE: dict[str, Rule] = {rule.variable: rule for rule in RULES}


def _show(value: object) -> str:
    """A value as a message shows it.

    Null, true and false as JSON writes them; text and numbers as Python does; anything else by
    its type.
    """
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, str) or json_shape.is_number(value):
        return repr(value)
    return f"a {type(value).__name__}"


def problem(label: str, value: object, rule: Rule) -> str:
    """The one sentence for a wrong value: who set it, the value, what is allowed."""
    return f"{label} is {_show(value)}: it must be {rule.allowed}"


class _Invalid(Exception):
    pass


def _check(rule: Rule, value: object) -> object:
    """The value if the rule allows it (typed values: bodies, contexts, options)."""
    if rule.kind in ("text", "optional_text"):
        if rule.kind == "optional_text" and value is None:
            return None
        if (given := json_shape.text(value)) is not None:
            return given
    elif rule.kind == "flag":
        if isinstance(value, bool):
            return value
    elif rule.kind == "choice":
        if value in rule.choices:  # the choices are texts: only a text equals one
            return value
    elif rule.kind == "count":
        number = json_shape.whole(value)
        if number is not None and number >= rule.minimum:
            return number
    elif rule.kind == "seconds":
        if json_shape.is_number(value) and math.isfinite(value) and value > 0:
            return float(value)
    raise _Invalid


def _parse(rule: Rule, text: str) -> object:
    """The typed value of a text (an environment variable or a command-line word)."""
    raw = text.strip()
    if rule.kind == "flag":
        word = raw.lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
        raise _Invalid
    if rule.kind == "count":
        try:
            return _check(rule, int(raw))
        except ValueError:
            raise _Invalid from None
    if rule.kind == "seconds":
        try:
            return _check(rule, float(raw))
        except ValueError:
            raise _Invalid from None
    return _check(rule, raw)


def check_value(rule: Rule, value: object, label: str | None = None) -> object:
    """The checked value of one setting.

    Raises:
        SettingsError: when the rule does not allow it (the message names ``label``).
    """
    try:
        return _check(rule, value)
    except _Invalid:
        raise SettingsError([problem(label or rule.name, value, rule)]) from None


def parse_value(rule: Rule, text: str, label: str | None = None) -> object:
    """The checked value of one setting given as text (a variable or an option).

    Raises:
        SettingsError: when the text is not an allowed value (the message names ``label``).
    """
    try:
        return _parse(rule, text)
    except _Invalid:
        raise SettingsError([problem(label or rule.variable, text, rule)]) from None


def unknown_key(key: str, known: tuple[str, ...] | None = None) -> str:
    """The sentence for a key that is not a run setting, with the closest known name."""
    names = known if known is not None else tuple(BY_NAME)
    close = difflib.get_close_matches(key, names, n=1)
    hint = f"did you mean {close[0]!r}?" if close else "known settings: " + ", ".join(names)
    return f"unknown run setting {key!r} ({hint})"


def check_settings(
    values: Mapping[str, object],
    *,
    allowed: tuple[str, ...] | None = None,
    label: Callable[[str], str] | None = None,
) -> dict[str, object]:
    """Check typed settings (a request body, a LangGraph context); report every problem at once.

    Args:
        values: setting name -> value.
        allowed: the names that may be set here (default: every setting).
        label: how a name is shown in messages (default: the name itself).

    Raises:
        SettingsError: listing every unknown key and every wrong value.
    """
    names = allowed if allowed is not None else tuple(BY_NAME)
    problems: list[str] = []
    checked: dict[str, object] = {}
    for key, value in values.items():
        rule = BY_NAME.get(key)
        if rule is None or key not in names:
            if rule is not None:
                problems.append(f"{key} cannot be set here; it is configured with {rule.variable}")
            else:
                problems.append(unknown_key(key, names))
            continue
        try:
            checked[key] = _check(rule, value)
        except _Invalid:
            problems.append(problem(label(key) if label else key, value, rule))
    if problems:
        raise SettingsError(problems)
    return checked


def env_value(name: str, environ: Mapping[str, str] | None = None) -> object | None:
    """The checked value of setting ``name`` from its environment variable (None when unset).

    Raises:
        SettingsError: naming the variable, its value and the allowed values.
    """
    rule = BY_NAME[name]
    raw = (os.environ if environ is None else environ).get(rule.variable)
    if raw is None or raw.strip() == "":
        return None
    return parse_value(rule, raw, rule.variable)


def check_environment(environ: Mapping[str, str] | None = None) -> list[str]:
    """Every problem with the run-setting variables of an environment (empty when all are fine)."""
    problems: list[str] = []
    for rule in RULES:
        try:
            env_value(rule.name, environ)
        except SettingsError as exc:
            problems.extend(exc.problems)
    return problems


def describe(name: str) -> str:
    """The description of a setting, with its variable (shown in LangGraph Studio's form)."""
    rule = BY_NAME[name]
    return f"{rule.description} ({rule.variable})"


def as_any(value: object) -> Any:
    """``value`` typed for a dataclass field (the rules made sure of its type)."""
    return value
