"""Scenario files (docs/contracts.md §9): their records, their pydantic model, and loading them.

A scenario file holds a question, a small evidence environment served by the sample backend, the
scripted replies of every model role and the expected outcome. ``load_scenario`` reads one and
``validate_scenario`` checks one; both return a ``Scenario`` record, which is all the evaluation
code sees.

Script shape: ``script.rounds`` is a list of one or two rounds, each ``{"planner": reply,
"executor": [step, ...], "verifier": reply}``; an executor step is ``{"tool_calls": [{"name",
"args"}]}`` or ``{"content": reply}``; ``verifier`` may also be a list of replies, one per
attempt, for a round whose first replies cannot be parsed and are repaired (the record always
holds a list). ``script.composer`` (optional) is the composer model's reply and switches the
composer to model mode. A reply is a string or a JSON object (sent as its JSON text). Besides the
documented keys, a scenario may carry a free-text ``description``. A key that may be left out
may not be null, except ``expect.model_verdict`` (null: the Verifier gave no verdict) and a tool
call's ``id``; the ``environment`` follows the rules of ``evidence.environment``.

Offline scenarios: ``"offline": true`` instead of a ``script`` runs the offline rules as the
planner, executor and verifier (as ``superbiz diagnose --offline``); ``max_tool_calls`` sets the
tool budget of a round. ``environment`` may name a bare environment file, relative to the
scenario's folder, so that several scenarios share one. ``expect.question_coverage`` is a
coverage status, or ``{status, asked, unanswered}`` (the lists compared as sets).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, NotRequired, Self, TypeAlias, TypeVar, cast

from pydantic import BeforeValidator, Field, StringConstraints, ValidationError, model_validator
from pydantic_core import PydanticCustomError
from typing_extensions import TypedDict

from evidence.environment import (
    ENVIRONMENT_WORDING,
    Environment,
    EnvironmentFile,
    EnvironmentFileError,
    FileModel,
    environment_reference,
    nested,
    refuse,
    validation_message,
)
from state.context import Language
from state.display import has_unstorable
from state.records import (
    MAX_ROUNDS,
    CoverageStatus,
    GatekeeperStatus,
    JSONObject,
    RuleId,
    Severity,
    Verdict,
)

# --------------------------------------------------------------------------- records

Reply: TypeAlias = str | JSONObject
"""A scripted model reply: its text, or a JSON object sent as its JSON text."""


class ToolCall(TypedDict):
    """A tool call the executor model makes; without an ``id`` it gets a fixed one."""

    name: str
    args: NotRequired[JSONObject]
    id: NotRequired[str | None]


class ExecutorStep(TypedDict, total=False):
    """One executor reply: tool calls, or a final message (at least one of them)."""

    tool_calls: list[ToolCall]
    content: Reply


class ScriptRound(TypedDict):
    """The replies of one round; ``verifier`` holds one reply per attempt."""

    planner: Reply
    executor: list[ExecutorStep]
    verifier: list[Reply]


class Script(TypedDict):
    """Every scripted reply of a scenario; a ``composer`` reply switches on model mode."""

    rounds: list[ScriptRound]
    composer: NotRequired[Reply]


class ExpectCoverage(TypedDict, total=False):
    """The question coverage a scenario expects; a key left out is not compared."""

    status: CoverageStatus
    asked: list[str]
    unanswered: list[str]


class Expect(TypedDict, total=False):
    """What a scenario expects of its run; a key left out is not compared."""

    verdict: Verdict
    model_verdict: Verdict | None
    rounds: int
    route: list[str]
    gatekeeper_status: GatekeeperStatus
    gatekeeper_severity: Severity
    gatekeeper_failed_rules: list[RuleId]
    groundedness_score: float
    confirmed_claims: list[str]
    answer_contains: list[str]
    answer_not_contains: list[str]
    question_coverage: ExpectCoverage
    root_cause_service: str | None


class Scenario(TypedDict):
    """A checked scenario (``expect`` is ``{}`` when the file has none).

    It has a ``script``, or ``offline`` true (the offline rules play every model role).
    """

    id: str
    question: str
    language: Language
    environment: Environment
    script: NotRequired[Script]
    offline: NotRequired[bool]
    max_tool_calls: NotRequired[int]
    expect: Expect
    description: NotRequired[str]


class ScenarioError(ValueError):
    """A scenario file cannot be used; the one-line message names the file and the problem."""


# --------------------------------------------------------------------------- model

_T = TypeVar("_T")


def _not_null(value: object) -> object:
    if value is None:
        raise PydanticCustomError("null", "must not be null; leave the key out instead")
    return value


_Omittable: TypeAlias = Annotated[_T | None, BeforeValidator(_not_null)]
"""A key that may be left out (``None`` on the model, absent from the record), but not be null."""


def _reply(value: object) -> object:
    if isinstance(value, str | dict):
        return value
    refuse(value, "a string or a JSON object")


def _attempts(value: object) -> object:
    if isinstance(value, str | dict):
        return [value]
    if isinstance(value, list):
        return value
    refuse(value, "a string, a JSON object or an array of them (one per attempt)")


_Reply = Annotated[Reply, BeforeValidator(_reply)]
_Text = Annotated[str, StringConstraints(pattern=r"\S")]


def _storable(value: object) -> object:
    """Refuse a text holding a lone UTF-16 surrogate or a NUL (no run could store or show it)."""
    if isinstance(value, str) and has_unstorable(value):
        position = next(i for i, char in enumerate(value) if has_unstorable(char))
        raise PydanticCustomError(
            "unstorable",
            "holds a lone UTF-16 surrogate or a NUL character (at character {position}); "
            "remove it or write the character it stands for",
            {"position": position},
        )
    return value


_Question = Annotated[str, BeforeValidator(_storable), StringConstraints(pattern=r"\S")]


class _ToolCall(FileModel):
    name: Annotated[str, Field(min_length=1)]
    args: _Omittable[JSONObject] = None
    id: str | None = None


class _Step(FileModel):
    tool_calls: _Omittable[Annotated[list[_ToolCall], Field(min_length=1)]] = None
    content: _Omittable[_Reply] = None

    @model_validator(mode="after")
    def _acts(self) -> Self:
        if self.tool_calls is None and self.content is None:
            raise PydanticCustomError("no_action", "needs 'tool_calls' or 'content'")
        return self


class _Round(FileModel):
    planner: _Reply
    executor: Annotated[list[_Step], Field(min_length=1)]
    verifier: Annotated[list[_Reply], BeforeValidator(_attempts), Field(min_length=1)]


class _Script(FileModel):
    rounds: Annotated[list[_Round], Field(min_length=1, max_length=MAX_ROUNDS)]
    composer: _Omittable[_Reply] = None


def _coverage(value: object) -> object:
    return {"status": value} if isinstance(value, str) else value


class _ExpectCoverage(FileModel):
    status: _Omittable[CoverageStatus] = None
    asked: _Omittable[list[str]] = None
    unanswered: _Omittable[list[str]] = None


class _Expect(FileModel):
    verdict: _Omittable[Verdict] = None
    model_verdict: Verdict | None = None
    rounds: _Omittable[Annotated[int, Field(ge=1, le=MAX_ROUNDS)]] = None
    route: _Omittable[list[str]] = None
    gatekeeper_status: _Omittable[GatekeeperStatus] = None
    gatekeeper_severity: _Omittable[Severity] = None
    gatekeeper_failed_rules: _Omittable[list[RuleId]] = None
    groundedness_score: _Omittable[Annotated[float, Field(ge=0.0, le=1.0)]] = None
    confirmed_claims: _Omittable[list[str]] = None
    answer_contains: _Omittable[list[str]] = None
    answer_not_contains: _Omittable[list[str]] = None
    question_coverage: _Omittable[Annotated[_ExpectCoverage, BeforeValidator(_coverage)]] = None
    root_cause_service: str | None = None


class ScenarioFile(FileModel):
    """The model of a scenario file; ``record`` gives the ``Scenario`` the code works with."""

    id: _Text
    question: _Question
    language: Language
    environment: EnvironmentFile
    script: _Omittable[_Script] = None
    offline: _Omittable[bool] = None
    max_tool_calls: _Omittable[Annotated[int, Field(ge=1)]] = None
    expect: _Expect = Field(default_factory=_Expect)
    description: _Omittable[str] = None

    @model_validator(mode="after")
    def _played(self) -> Self:
        if self.offline and self.script is not None:
            raise PydanticCustomError(
                "offline_script", "an offline scenario has no 'script'; remove one of them"
            )
        if not self.offline and self.script is None:
            raise PydanticCustomError(
                "no_script",
                "needs a 'script' of model replies, or \"offline\": true to run the offline rules",
            )
        return self

    def record(self) -> Scenario:
        """The scenario as a record: the keys given (and ``expect``), the verifier as a list."""
        return cast(Scenario, {"expect": {}, **self.model_dump(exclude_unset=True)})


_STEP = "script.rounds[].executor[]"
_WORDING: dict[str, str] = {
    "": "a scenario must be a JSON object, got {got}",
    "id": "'id' must be a non-empty string",
    "question": "'question' must be a non-empty string",
    "language": "'language' must be 'zh' or 'en', got {value}",
    "description": "'description' must be a string",
    "script": "'script' must be an object with 'rounds', got {got}",
    "script.rounds": "{where} must be an array of one or two rounds",
    "script.rounds[]": "{where} must be an object with planner, executor and verifier, got {got}",
    _STEP: "{where} must be an object with 'tool_calls' or 'content', got {got}",
    f"{_STEP}.tool_calls": "{where} must be a non-empty array of {{name, args}} objects",
    f"{_STEP}.tool_calls[]": "{where} must be an object {{name, args}}, got {got}",
    f"{_STEP}.tool_calls[].name": "{where} must be a tool name",
    "expect.model_verdict": "{where} must be one of PASS, LOW_CONFID, REJECT or null, got {value}",
    "expect.rounds": "{where} must be 1 or 2",
    "expect.groundedness_score": "{where} must be a number between 0 and 1",
    "expect.question_coverage": (
        "{where} must be answered, partial or unanswered, or an object with status, asked, "
        "unanswered"
    ),
    "max_tool_calls": "{where} must be a whole number of at least 1",
    "offline": "{where} must be true or false",
    **nested("environment", ENVIRONMENT_WORDING),
}
"""Messages for a scenario's errors where the generic ones would say less (see
``evidence.environment.validation_message``)."""


# --------------------------------------------------------------------------- loading


def validate_scenario(
    data: object, origin: str = "scenario", base: str | Path | None = None
) -> Scenario:
    """Check that ``data`` is a usable scenario.

    Args:
        data: The parsed scenario object (or a ``Scenario`` record, checked again).
        origin: How to name the scenario in messages (usually its file path).
        base: The folder an ``environment`` file name is relative to (the current folder when
            None).

    Returns:
        The scenario record.

    Raises:
        ScenarioError: With a one-line message naming ``origin``, the field and what is wrong.
    """
    if isinstance(data, dict):
        try:
            data = environment_reference(data, base=Path(base or "."), origin=origin)
        except EnvironmentFileError as exc:
            raise ScenarioError(str(exc)) from None
    try:
        return ScenarioFile.model_validate(data).record()
    except ValidationError as exc:
        message = validation_message(exc, subject="the scenario", wording=_WORDING)
        raise ScenarioError(f"{origin}: {message}") from None


def load_scenario(path: str | Path) -> Scenario:
    """Read and check one scenario file.

    Args:
        path: A scenario JSON file.

    Returns:
        The scenario record.

    Raises:
        ScenarioError: The file cannot be read, is not JSON, or is not a valid scenario; the
            one-line message names the file and what is wrong.
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(f"{file}: no such file") from None
    except IsADirectoryError:
        raise ScenarioError(f"{file}: is a folder, not a scenario file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{file}: cannot read it ({type(exc).__name__}: {exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScenarioError(
            f"{file}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    return validate_scenario(data, origin=str(file), base=file.parent)
