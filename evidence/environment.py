"""Environment files: the evidence the sample backend serves, checked where it enters.

An environment is a JSON object with ``logs``, ``alerts``, ``series`` and ``documents`` (arrays of
entries in the tool output shapes, docs/contracts.md §2) and ``now`` (ISO-8601); every key is
optional. A file holds either a bare environment or a scenario whose ``environment`` key holds one
(README, ``--env FILE``). ``EnvironmentFile`` is the pydantic model of that object; a validated
environment is dumped into an ``Environment`` record, which is all the code behind it sees.

Entry rules: log lines need ``timestamp`` (ISO-8601, checked with ``parse_timestamp``), ``level``,
``service`` and ``message``; alerts ``alert_name``, ``service`` and ``state``; series ``metric``;
documents ``doc_id``, ``title`` and ``chunk``. Values are not coerced (a number is no string), a
key given as null counts as absent, and keys an entry record does not have are dropped.

``FileModel``, ``refuse`` and ``validation_message`` serve every file model (the scenario's
too): a ``ValidationError`` becomes one line naming the field, e.g.
``environment.logs[3].timestamp``, what is wrong there and what to write instead.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Annotated, NoReturn, NotRequired, Self, TypeAlias, cast, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError
from pydantic_core.core_schema import ErrorType
from typing_extensions import TypedDict

from evidence.otlp import read_spans
from evidence.replay import ReplayEnvironment
from state import json_shape
from state.json_shape import json_type
from state.records import (
    AlertEntry,
    DocumentEntry,
    InvocationStatus,
    JSONObject,
    JSONScalar,
    LogEntry,
    SeriesEntry,
    SpanEntry,
)
from tools.backend import parse_timestamp

_SAMPLE_RESOURCE = "sample_environment.json"
_BUILT_IN_ERRORS = frozenset(get_args(ErrorType))
_EXPECTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "list_type": "an array",
    "dict_type": "an object",
    "model_type": "an object",
}
"""How ``validation_message`` names the type a built-in type error expected."""

Wording: TypeAlias = Mapping[str, str]
"""Messages by location pattern; see ``validation_message``."""


class EnvironmentFileError(ValueError):
    """An environment or scenario file cannot be used; the message says what to fix."""


class Environment(TypedDict, total=False):
    """What the sample backend serves (every key optional), or a replay's recorded calls.

    ``replay`` (alone) holds a recorded diagnosis's tool results, served by ``evidence.replay``.
    """

    logs: list[LogEntry]
    alerts: list[AlertEntry]
    series: list[SeriesEntry]
    documents: list[DocumentEntry]
    traces: list[SpanEntry]
    """Spans, read from the file's OTLP JSON (``evidence.otlp``)."""
    now: str
    replay: NotRequired[ReplayEnvironment]


# --------------------------------------------------------------------------- messages


def refuse(value: object, must_be: str) -> NoReturn:
    """Refuse ``value`` in a validator; the message reads ``must be <must_be>, got <its type>``.

    Raises:
        PydanticCustomError: Always.
    """
    raise PydanticCustomError(
        "wrong_type", "must be {must_be}, got {got}", {"must_be": must_be, "got": json_type(value)}
    )


def _path(loc: Sequence[int | str], *, indexes: bool = True) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]" if indexes else "[]"
        else:
            text += f".{part}" if text else part
    return text


def nested(prefix: str, wording: Wording) -> dict[str, str]:
    """``wording`` for a model that sits at ``prefix`` inside another one."""
    return {
        prefix + ("" if not key or key.startswith("[") else ".") + key: text
        for key, text in wording.items()
    }


def validation_message(exc: ValidationError, *, subject: str, wording: Wording) -> str:
    """The first error of ``exc`` as one line: where it is, what is wrong and what to write.

    The location reads ``script.rounds[0].executor[1]`` (``subject`` names the validated object
    itself). A message a validator raised as a ``PydanticCustomError`` follows the location as it
    is; a built-in error is worded from its type, unless ``wording`` has a message for its location.

    Args:
        exc: What pydantic raised.
        subject: How to name the validated object itself, e.g. ``the scenario``.
        wording: Messages by location pattern, indexes written ``[]`` (``""`` is the object
            itself), used for any built-in error exactly there, a missing key included. They may
            use ``{where}`` (the location), ``{got}`` (the JSON type of the value) and
            ``{value}`` (its ``repr``); both say ``nothing`` for a missing key.

    Returns:
        The message, without the file name.
    """
    error = exc.errors(include_url=False)[0]
    loc, kind = error["loc"], error["type"]
    where = _path(loc) or subject
    if kind not in _BUILT_IN_ERRORS:
        return f"{where} {error['msg']}"
    missing = kind == "missing"
    value = error.get("input")
    template = wording.get(_path(loc, indexes=False))
    if template is not None:
        got = "nothing" if missing else json_type(value)
        return template.format(where=where, got=got, value="nothing" if missing else repr(value))
    if missing:
        return (
            f"{_path(loc[:-1])} is missing '{loc[-1]}'" if loc[:-1] else f"'{loc[-1]}' is missing"
        )
    ctx = error.get("ctx", {})
    if kind == "value_error":
        return f"{where}: {ctx['error']}"
    if kind in _EXPECTED:
        return f"{where} must be {_EXPECTED[kind]}, got {json_type(value)}"
    if kind == "literal_error":
        return f"{where} must be one of {ctx['expected']}, got {value!r}"
    if kind == "too_short" and ctx.get("min_length") == 1:
        return f"{where} must not be an empty array"
    return f"{where}: {error['msg']}"


# --------------------------------------------------------------------------- models


class FileModel(BaseModel):
    """A JSON object read from a file: values are not coerced and unknown keys are refused.

    Unknown keys are refused before the fields are checked, naming the keys allowed (in the order
    of the fields), since a misspelt key is the likeliest cause of every other error there.
    """

    model_config = ConfigDict(strict=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: object) -> object:
        unknown = sorted(str(key) for key in json_shape.obj(data) if key not in cls.model_fields)
        if unknown:
            raise PydanticCustomError(
                "unknown_keys",
                "has unknown key(s) {unknown}; allowed: {allowed}",
                {"unknown": ", ".join(unknown), "allowed": ", ".join(cls.model_fields)},
            )
        return data


def _without_nulls(
    model: type[BaseModel], data: object, check: Callable[[dict[str, object]], None]
) -> object:
    """``data`` without the keys of ``model``'s fields that are null (null counts as absent).

    ``check`` sees what is left (and raises for what the model refuses); anything but an object
    is returned as it is, for the model's own type check.
    """
    if not isinstance(data, dict):
        return data
    given = {
        key: value
        for key, value in data.items()
        if value is not None or key not in model.model_fields
    }
    check(given)
    return given


def _iso_timestamp(value: str) -> str:
    parse_timestamp(value)
    return value


def _scalar(value: object) -> object:
    if value is None or isinstance(value, str | int | float):
        return value
    refuse(value, "a string, a number, true, false or null")


Timestamp = Annotated[str, AfterValidator(_iso_timestamp)]
"""An ISO-8601 timestamp (``tools.backend.parse_timestamp``), kept as written."""

_Scalar = Annotated[JSONScalar, BeforeValidator(_scalar)]


class _Entry(BaseModel):
    """One environment entry: the fields of its record; those without a default are required."""

    model_config = ConfigDict(strict=True, extra="ignore")

    @model_validator(mode="before")
    @classmethod
    def _nulls_absent(cls, data: object) -> object:
        return _without_nulls(cls, data, cls._required_fields)

    @classmethod
    def _required_fields(cls, given: dict[str, object]) -> None:
        required = [name for name, field in cls.model_fields.items() if field.is_required()]
        for name in required:
            if name not in given:
                raise PydanticCustomError(
                    "missing_field",
                    "is missing required field '{field}'; add it (required: {required}) or "
                    "remove the entry",
                    {"field": name, "required": ", ".join(required)},
                )


class _Log(_Entry):
    timestamp: Timestamp
    level: str
    service: str
    instance: str | None = None
    message: str


class _Alert(_Entry):
    alert_name: str
    service: str
    severity: str | None = None
    state: str
    value: _Scalar = None
    threshold: _Scalar = None
    summary: str | None = None
    active_at: str | None = None
    runbook_url: str | None = None


class _Series(_Entry):
    metric: str
    labels: dict[str, str] | None = None
    points_count: int | None = None
    min: float | None = None
    max: float | None = None
    last: float | None = None
    unit: str | None = None
    points: list[list[float]] | None = None


class _Document(_Entry):
    doc_id: str
    title: str
    source: str | None = None
    chunk: str


class _ReplayCall(FileModel):
    tool: Annotated[str, Field(min_length=1)]
    arguments: JSONObject = {}
    status: InvocationStatus
    output: JSONObject | None = None
    error: str | None = None

    @model_validator(mode="after")
    def _result(self) -> Self:
        if self.status == "error" and self.error is None:
            raise PydanticCustomError("no_error", "is an 'error' call without its 'error' text")
        if self.status != "error" and self.output is None:
            raise PydanticCustomError(
                "no_output", "is an '{status}' call without its 'output'", {"status": self.status}
            )
        return self


class _Replay(FileModel):
    services: list[str] = []
    calls: list[_ReplayCall] = []


def _replay_alone(given: dict[str, object]) -> None:
    if "replay" in given and len(given) > 1:
        others = ", ".join(sorted(str(key) for key in given if key != "replay"))
        raise PydanticCustomError(
            "replay_alone",
            "has 'replay' and also {others}: a replay environment serves only the recorded "
            "calls; remove one of them",
            {"others": others},
        )


def _read_span(item: object) -> bool:
    """Whether an item is a span entry already read (``trace_id`` and ``span_id``, no OTLP)."""
    return isinstance(item, dict) and "trace_id" in item and "span_id" in item


def _otlp_requests(value: object) -> object:
    """``traces``: one OTLP JSON ``ExportTraceServiceRequest`` object, or a list of them.

    Spans already read (a record's ``traces``, checked again) are kept as they are.
    """
    if isinstance(value, list) and value and all(_read_span(item) for item in value):
        return value
    requests = value if isinstance(value, list) else [value]
    for index, request in enumerate(requests):
        if not isinstance(request, dict) or not isinstance(request.get("resourceSpans"), list):
            where = f"[{index}]" if isinstance(value, list) else ""
            raise PydanticCustomError(
                "otlp",
                "{where}must be an OTLP JSON ExportTraceServiceRequest object with "
                "'resourceSpans' (or a list of them), got {got}",
                {"where": f"item {where} " if where else "", "got": json_type(request)},
            )
    read = read_spans(requests)
    if read.skipped:
        raise PydanticCustomError(
            "otlp_spans",
            "has {n} span(s) without a hex or base64 traceId/spanId or with no valid "
            "startTimeUnixNano/endTimeUnixNano; fix or remove them",
            {"n": read.skipped},
        )
    return read.spans


class EnvironmentFile(FileModel):
    """The environment object of an environment or scenario file."""

    logs: list[_Log] = []
    alerts: list[_Alert] = []
    series: list[_Series] = []
    documents: list[_Document] = []
    traces: Annotated[list[SpanEntry], BeforeValidator(_otlp_requests)] = []
    now: Timestamp | None = None
    replay: _Replay | None = None

    @model_validator(mode="before")
    @classmethod
    def _absent_nulls(cls, data: object) -> object:
        return _without_nulls(cls, data, _replay_alone)

    def record(self) -> Environment:
        """The environment as a record: the keys and entry fields given (a replay in full)."""
        if self.replay is not None:
            return cast(Environment, {"replay": self.replay.model_dump()})
        return cast(Environment, self.model_dump(exclude_unset=True))


ENVIRONMENT_KEYS: tuple[str, ...] = tuple(k for k in EnvironmentFile.model_fields if k != "replay")
"""The keys a sample environment may have (a replay environment has ``replay`` alone)."""

_KEYS = ", ".join(ENVIRONMENT_KEYS)

ENVIRONMENT_WORDING: dict[str, str] = {
    "": f"{{where}} must be a JSON object with keys among {_KEYS}, got {{got}}",
    **{
        array: "{where} must be a list of objects, got {got}"
        for array in ("logs", "alerts", "series", "documents")
    },
    "series[].labels": (
        '{where} must be an object such as {{"service": "order-service"}}, got {got}'
    ),
    "replay": "{where} must be an object with 'services' and 'calls', got {got}",
    "replay.calls[].status": "{where} must be 'ok', 'no_hit' or 'error', got {value}",
}
"""Messages for an environment's errors, by location (see ``validation_message``)."""


class _ScenarioEnvironment(BaseModel):
    """A scenario file read for its environment only (its other keys are not looked at)."""

    environment: EnvironmentFile


# --------------------------------------------------------------------------- loading


def _where(exc: json.JSONDecodeError) -> str:
    """What is wrong in JSON text and where: ``Expecting value at line 3 column 9``."""
    return f"{exc.msg} at line {exc.lineno} column {exc.colno}"


def environment_reference(data: dict[str, object], *, base: Path, origin: str) -> dict[str, object]:
    """A scenario whose ``environment`` names a file, with that file's environment in its place.

    The name is a path relative to ``base`` (the scenario's folder) of a bare environment file;
    several scenarios can so share one environment. Anything else is returned unchanged.

    Raises:
        EnvironmentFileError: The named file cannot be read or is not a bare environment.
    """
    named = data.get("environment")
    if not isinstance(named, str):
        return data
    target = base / named
    try:
        text = target.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise EnvironmentFileError(
            f"{origin}: environment names {named!r}, which cannot be read "
            f"({type(exc).__name__}); give a path relative to the scenario's folder"
        ) from None
    loaded = json_shape.loads(
        text, lambda exc: EnvironmentFileError(f"{target} is not valid JSON: {_where(exc)}")
    )
    if "environment" in json_shape.obj(loaded):
        raise EnvironmentFileError(
            f"{origin}: environment names {target}, a scenario; name a bare environment file"
        )
    return {**data, "environment": loaded}


def parse_environment(text: str, *, origin: str, base: Path | None = None) -> Environment:
    """Parses and checks an environment from JSON text.

    Args:
        text: A scenario (an object with an ``environment`` key) or a bare environment object.
        origin: How to name the source in messages (usually the file path).
        base: The folder a scenario's ``environment`` file name is relative to (the current
            folder when None).

    Returns:
        The environment record.

    Raises:
        EnvironmentFileError: When the text is not JSON, not an object, of an unknown shape, or
            the environment breaks a rule of ``EnvironmentFile``.
    """
    data = json_shape.loads(
        text,
        lambda exc: EnvironmentFileError(
            f"{origin} is not valid JSON: {_where(exc)}; fix the syntax there"
        ),
    )
    if not isinstance(data, dict):
        raise EnvironmentFileError(
            f"{origin} must contain a JSON object (a scenario with an 'environment' key, or an "
            f"environment with keys among {_KEYS}), got {json_type(data)}"
        )
    in_scenario = "environment" in data
    data = environment_reference(data, base=base or Path("."), origin=origin)
    if not in_scenario and not (data and set(data) <= {*ENVIRONMENT_KEYS, "replay"}):
        found = ", ".join(sorted(data)) or "none"
        raise EnvironmentFileError(
            f"{origin} is neither a scenario (no 'environment' key) nor an environment (keys "
            f"found: {found}; expected keys among {_KEYS})"
        )
    try:
        if in_scenario:
            return _ScenarioEnvironment.model_validate(data).environment.record()
        return EnvironmentFile.model_validate(data).record()
    except ValidationError as exc:
        wording = nested("environment", ENVIRONMENT_WORDING) if in_scenario else ENVIRONMENT_WORDING
        message = validation_message(exc, subject="the environment", wording=wording)
        raise EnvironmentFileError(f"{origin}: {message}") from None


def load_environment(path: str | Path) -> Environment:
    """Reads an environment from a file.

    Args:
        path: A scenario file (an object with an ``environment`` key) or a bare environment file
            (an object with keys among logs, alerts, series, documents, now).

    Returns:
        The environment record.

    Raises:
        EnvironmentFileError: With a one-line message saying what is wrong and how to fix it.
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise EnvironmentFileError(
            f"environment file {file} does not exist; pass the path of a scenario or "
            "environment JSON file"
        ) from None
    except IsADirectoryError:
        raise EnvironmentFileError(
            f"environment file {file} is a directory; pass the path of a JSON file"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise EnvironmentFileError(
            f"cannot read environment file {file} ({type(exc).__name__}: {exc}); check that it "
            "exists, is readable and is UTF-8 text"
        ) from None
    return parse_environment(text, origin=str(file), base=file.parent)


def default_environment() -> Environment:
    """Loads the bundled sample incident environment (``evidence/data/sample_environment.json``).

    Returns:
        A fresh copy of the environment record.
    """
    resource = resources.files("evidence.data").joinpath(_SAMPLE_RESOURCE)
    text = resource.read_text(encoding="utf-8")
    return parse_environment(text, origin=f"evidence/data/{_SAMPLE_RESOURCE}")
