"""The tool spec: one declaration of everything the product needs to know about one tool.

A tool is one module of this package (``tools/query_logs.py``, ...) whose ``SPEC`` says:

- its **name**, the **description** the model reads and its **arguments**: a pydantic model
  (``ModelArguments``) or a JSON schema (``SchemaArguments``, e.g. a tool a third-party server
  lists at run time); the JSON schema handed to the model comes from either;
- its **role**: ``incident`` evidence, ``guidance`` (citable, but never evidence about the
  incident: runbooks and past cases) or ``helper`` (no refs, left out of the trace summary);
- its **entry arrays** (``EntryArray``): the output arrays whose entries are citable refs
  (``logs[0]``), each with its source type, its one-line renderer (the ref text, a contract),
  the text that may ground a claim's specifics, how one entry is bounded, the arrays inside an
  entry (refs such as ``traces[0].spans[3]``) and how the web page shows it (``Display``);
- its **bounds** (the argument that caps the entries, at most how many per array, the string
  cap) and its **counts** (``total``, per-array totals, the window it searched), from which the
  runner bounds the output and the ``summary`` ref states what matched;
- its **output model** (what the bounded output is validated into), its **status rule**
  (``ok`` / ``no_hit``), **how the backend is asked** (``ask``, with optional ``prepare`` /
  ``annotate`` steps that read the diagnosis's earlier invocations), what a helper shows the
  model of its output, how the **trace summary** describes a call, and whether the **offline
  rules** may plan a call of it.

The registry (``tools.registry``) holds the specs; the runner, refs, trace summary, executor,
replay, offline rules and web page iterate it and know no tool by name.
"""

from __future__ import annotations

import copy
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal, Protocol, runtime_checkable

import jsonschema
from pydantic import BaseModel, TypeAdapter, ValidationError

from state.json_shape import objects
from state.records import Invocation, InvocationStatus, JSONObject, RetrievalDetails, TraceItem

Role = Literal["incident", "guidance", "helper"]
"""``incident``: evidence about the incident; ``guidance``: citable, never incident evidence
(it never grounds a claim's specifics and a claim resting on it alone is ``external_unknown``);
``helper``: no refs, not in the trace summary."""

DisplayKind = Literal["log", "alert", "series", "document", "table", "callgraph", "spantree"]
"""How the web page draws an entry array: a log timeline, an alert, a series chart, a
document, a table of the ``fields`` shown, a call graph of ``caller -> callee`` edges, or the
span trees of traces (their ``spans``)."""

MAX_ENTRIES = 100
"""Upper bound on the entries of any output array (a tool's bounding argument may lower it)."""

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_PATH_STEP = re.compile(r"(?P<array>[A-Za-z_][A-Za-z0-9_]*)\[(?P<index>\d+)\]")


class ArgumentError(ValueError):
    """A call's arguments are not valid; the message says what is wrong, for the model."""


@dataclass(frozen=True)
class Validated:
    """A call's validated arguments.

    ``recorded``: as the caller passed them, defaults and nulls left out (the invocation's
    ``arguments``); ``full``: what the backend receives, defaults filled.
    """

    recorded: JSONObject
    full: dict[str, Any]


class Arguments(ABC):
    """How a tool's arguments are declared, validated and shown to the model."""

    @abstractmethod
    def parameters(self) -> JSONObject:
        """The JSON schema of the arguments handed to the model (an object schema)."""

    @abstractmethod
    def validate(self, tool_name: str, raw: Mapping[str, Any]) -> Validated:
        """The validated arguments of one call.

        Raises:
            ArgumentError: When they are not valid (the message names the tool and each problem).
        """


def _strip_titles(node: Any) -> Any:
    """Removes pydantic's ``title`` keys, which only add noise to a tool schema."""
    if isinstance(node, dict):
        return {k: _strip_titles(v) for k, v in node.items() if k != "title"}
    if isinstance(node, list):
        return [_strip_titles(v) for v in node]
    return node


def _collapse_optional(prop: dict[str, Any]) -> dict[str, Any]:
    """Turns ``anyOf: [{type: X}, {type: null}]`` into ``type: X`` (omitting it means null)."""
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


@dataclass(frozen=True)
class ModelArguments(Arguments):
    """Arguments declared by a pydantic model (strict: ``extra="forbid"`` is expected).

    ``order`` lists the parameters in the order the model reads them; the others follow in the
    model's order.
    """

    model: type[BaseModel]
    order: tuple[str, ...] = ()

    def parameters(self) -> JSONObject:
        """``{type: object, properties, required, additionalProperties: false}``."""
        schema = _strip_titles(copy.deepcopy(self.model.model_json_schema()))
        raw = schema.get("properties", {})
        rank = {name: index for index, name in enumerate(self.order)}
        ordered = sorted(raw, key=lambda name: rank.get(name, len(rank)))
        properties: JSONObject = {name: _collapse_optional(raw[name]) for name in ordered}
        return {
            "type": "object",
            "properties": properties,
            "required": list(schema.get("required", [])),
            "additionalProperties": False,
        }

    def validate(self, tool_name: str, raw: Mapping[str, Any]) -> Validated:
        """Validate with the model (see ``Arguments.validate``)."""
        try:
            validated = self.model.model_validate(raw)
        except ValidationError as exc:
            problems = [
                f"{'.'.join(str(part) for part in error['loc']) or 'arguments'}: {error['msg']}"
                for error in exc.errors()
            ]
            raise ArgumentError(
                f"invalid arguments for {tool_name}: " + "; ".join(problems)
            ) from None
        return Validated(
            recorded=validated.model_dump(exclude_none=True, exclude_unset=True),
            full=validated.model_dump(),
        )


@dataclass(frozen=True)
class SchemaArguments(Arguments):
    """Arguments declared by a JSON schema (e.g. a tool listed by a third-party server).

    The schema is checked when the spec is made; ``default`` values of its top-level
    properties fill the arguments the backend receives.
    """

    schema: JSONObject

    def __post_init__(self) -> None:
        jsonschema.validators.validator_for(self.schema).check_schema(self.schema)

    @cached_property
    def _validator(self) -> jsonschema.protocols.Validator:
        return jsonschema.validators.validator_for(self.schema)(self.schema)

    def parameters(self) -> JSONObject:
        """The schema as declared (an object schema)."""
        return copy.deepcopy(self.schema)

    def validate(self, tool_name: str, raw: Mapping[str, Any]) -> Validated:
        """Validate against the schema (see ``Arguments.validate``)."""
        given = dict(raw)
        errors = sorted(self._validator.iter_errors(given), key=lambda e: list(e.absolute_path))
        if errors:
            problems = [
                f"{'.'.join(str(part) for part in error.absolute_path) or 'arguments'}: "
                f"{error.message}"
                for error in errors
            ]
            raise ArgumentError(f"invalid arguments for {tool_name}: " + "; ".join(problems))
        recorded: JSONObject = {key: value for key, value in given.items() if value is not None}
        properties = self.schema.get("properties")
        defaults = {
            name: copy.deepcopy(prop["default"])
            for name, prop in (properties.items() if isinstance(properties, dict) else [])
            if isinstance(prop, dict) and "default" in prop
        }
        return Validated(recorded=recorded, full={**defaults, **recorded})


@dataclass(frozen=True)
class Display:
    """How the web page shows the entries of one array: a kind, and the fields it shows."""

    kind: DisplayKind
    fields: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class EntryArray:
    """One output array whose entries are citable refs.

    Attributes:
        name: The array's key in the output and in raw paths (``logs`` -> ``logs[0]``).
        source_type: The refs' ``source_type`` (``log``, ``alert``, ``metric``, ...).
        render: One entry (a JSON object) as its one-line ref text.
        display: How the web page shows the entries.
        grounding: The text of an entry that may ground a claim's counts and values; None:
            the ref text.
        bound_entry: Applied to each kept entry before strings are capped (e.g. a series'
            points thinned); None: the entry as it is.
        within: Arrays inside each entry, citable as ``<name>[i].<inner>[j]``.
    """

    name: str
    source_type: str
    render: Callable[[Any], str]
    display: Display
    grounding: Callable[[Any], str] | None = None
    bound_entry: Callable[[Any], Any] | None = None
    within: tuple[EntryArray, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Bounds:
    """How the runner bounds an output.

    Attributes:
        argument: The argument that caps every array's entries (``limit``, ``top_k``).
        entries: At most this many entries per array (and per inner array).
        field_chars: Strings longer than this are cut; None: the runner's field cap.
        fields: Output keys besides the arrays and counts that the runner keeps (their strings
            cut like the entries'): a result's own conclusion, such as the incident analysis's
            ``root_cause``.
    """

    argument: str | None = None
    entries: int = MAX_ENTRIES
    field_chars: int | None = None
    fields: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Counts:
    """What an output reports besides its entries, and so what its ``summary`` ref states.

    Attributes:
        total: ``total`` counts the matches before the bound (``total_at_least``: a lower
            bound) and ``truncated`` is always present; the summary reads ``matched <n> of
            <total>``. Otherwise ``n`` and the total both count the entries returned.
        per_array: Each array has its own ``<array>_total`` (a lower bound when
            ``<array>_total_at_least``); the summary counts the arrays separately (``alerts 0 of
            0, series 1 of 1``, ``traces 20 of at least 140``).
        window: ``window_start`` / ``window_end``, the absolute window a source searched; the
            summary states it.
    """

    total: bool = False
    per_array: bool = False
    window: bool = False


@dataclass(frozen=True, kw_only=True)
class Trace:
    """How the Verifier's trace summary describes a tool's calls; None: the default rule.

    Attributes:
        parts: The output summary of an ok call, concrete facts first (joined and clipped by
            the trace summary). Default: each entry's ref text, array by array.
        floor: The shortest summary of an ok call, its size. Default: ``<n> <array>, ...``.
        effective: Whether an ok call is an effective hit. Default: it returned entries.
        extras: Adds fields to an item being built (``TraceItem``'s optional ones) from all its
            calls, given the clip of one value.
    """

    parts: Callable[[Invocation], Iterable[str]] | None = None
    floor: Callable[[Invocation], str] | None = None
    effective: Callable[[Invocation], bool] | None = None
    extras: Callable[[TraceItem, Sequence[Invocation], Callable[[str], str]], None] | None = None


@dataclass(frozen=True, kw_only=True)
class Call:
    """One validated call, as the spec's ``prepare``, ``ask`` and ``annotate`` see it.

    Attributes:
        tool: The tool's name.
        backend: The evidence backend the runner was given.
        arguments: The validated arguments, defaults filled.
        extras: Keywords ``prepare`` added for the backend (e.g. ``runbook_urls``).
        earlier: The diagnosis's invocations recorded so far (read once, when first asked).
    """

    tool: str
    backend: Any
    arguments: dict[str, Any]
    earlier: Callable[[], list[Invocation]]
    extras: Mapping[str, object] = field(default_factory=dict)


@runtime_checkable
class AnswersEveryTool(Protocol):
    """A backend that answers any tool by name (a replay of recorded calls).

    The runner asks it instead of the spec's ``ask``, with the arguments and extras as keywords.
    """

    def answer_tool_call(self, tool: str, keywords: dict[str, Any]) -> object:
        """The recorded (or otherwise known) result of one call."""
        ...


class NotServed(Exception):
    """The backend has no method for a tool (raised by the default ``ask``)."""


def entries_of(output: Mapping[str, object] | None, array: str) -> list[dict[str, Any]]:
    """The entries (JSON objects) of one output array; other items and absent arrays: none."""
    return objects(output.get(array)) if output is not None else []


def count_entries(output: Mapping[str, object] | None, array: str) -> int:
    """How many items one output array holds (0 when it is absent or no array); no copy."""
    listed = output.get(array) if output is not None else None
    return len(listed) if isinstance(listed, list) else 0


@dataclass(frozen=True, kw_only=True)
class ToolSpec:
    """One tool, declared once (see the module docstring).

    Attributes:
        name: The tool's name (letters, digits, ``_`` and ``-``, at most 64).
        description: What the model reads about it.
        arguments: Its arguments.
        role: ``incident``, ``guidance`` or ``helper``.
        arrays: Its entry arrays, in ref order (none for a helper).
        output: The model the bounded output is validated into (a ``TypedDict`` or pydantic
            model); None: any JSON object.
        bounds: How the runner bounds the output.
        counts: What the output reports besides its entries.
        status: ``ok`` / ``no_hit`` of an output; None: ``no_hit`` when an evidence tool
            returned no entry at all, else ``ok``.
        ask: Calls the backend; None: its method named after the tool, with the arguments and
            extras as keywords.
        prepare: Extra keywords for the backend, read from the call (e.g. earlier invocations).
        annotate: Retrieval details recorded with the invocation, from the call and its
            validated output (which it may mark, e.g. documents seen before).
        message_output: The output keys a helper's tool message shows the model.
        trace: How the trace summary describes its calls.
        planned_offline: Whether the offline rules may put a call of it in a plan.
        needs: The kind of evidence a backend must serve for the tool to be offered
            (``traces``); None: offered whatever the backend (``tools.registry.offered``).
    """

    name: str
    description: str
    arguments: Arguments
    role: Role = "incident"
    arrays: tuple[EntryArray, ...] = ()
    output: type[Any] | None = None
    bounds: Bounds = Bounds()
    counts: Counts = Counts()
    status: Callable[[JSONObject], InvocationStatus] | None = None
    ask: Callable[[Call], object] | None = None
    prepare: Callable[[Call], Mapping[str, object]] | None = None
    annotate: Callable[[Call, JSONObject], RetrievalDetails] | None = None
    message_output: tuple[str, ...] = ()
    trace: Trace = Trace()
    planned_offline: bool = True
    needs: str | None = None

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"tool name {self.name!r}: use 1-64 letters, digits, _ or -")
        if self.role == "helper" and self.arrays:
            raise ValueError(f"helper tool {self.name} cannot have entry arrays")
        names = [array.name for array in self.arrays]
        if len(set(names)) != len(names) or "summary" in names:
            raise ValueError(f"tool {self.name}: entry arrays must be unique and not 'summary'")

    @cached_property
    def evidence(self) -> bool:
        """Whether its results are citable (incident evidence or guidance)."""
        return self.role != "helper"

    @cached_property
    def grounds_apart(self) -> bool:
        """Whether an entry array has a grounding text of its own (not its ref text)."""

        def any_grounding(arrays: tuple[EntryArray, ...]) -> bool:
            return any(a.grounding is not None or any_grounding(a.within) for a in arrays)

        return any_grounding(self.arrays)

    @cached_property
    def guidance(self) -> bool:
        """Whether its refs are guidance only, never evidence about the incident."""
        return self.role == "guidance"

    def openai_tool(self) -> JSONObject:
        """``{"type": "function", "function": {"name", "description", "parameters"}}``."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.arguments.parameters(),
            },
        }

    @cached_property
    def _output_adapter(self) -> TypeAdapter[Any] | None:
        return TypeAdapter(self.output) if self.output is not None else None

    def validate_output(self, plain: JSONObject) -> JSONObject:
        """The bounded output validated into the output model (as plain JSON).

        Raises:
            pydantic.ValidationError: When it does not have the model's shape.
        """
        adapter = self._output_adapter
        if adapter is None:
            return plain
        validated = adapter.validate_python(plain)
        if isinstance(validated, BaseModel):
            dumped: JSONObject = validated.model_dump(mode="json")
            return dumped
        result: JSONObject = validated
        return result

    def call_backend(self, call: Call) -> object:
        """Ask the backend for one call (``ask``, else the method named after the tool).

        Raises:
            NotServed: When the backend has no such method.
        """
        if self.ask is not None:
            return self.ask(call)
        method = getattr(call.backend, self.name, None)
        if not callable(method):
            raise NotServed(f"the evidence backend does not serve {self.name}")
        return method(**call.arguments, **call.extras)

    def status_of(self, output: JSONObject) -> InvocationStatus:
        """``ok`` or ``no_hit`` of a bounded output (see ``status``)."""
        if self.status is not None:
            return self.status(output)
        if not self.evidence:
            return "ok"
        for array in self.arrays:
            if count_entries(output, array.name):
                return "ok"
        return "no_hit"

    def locate(
        self, output: Mapping[str, object] | None, raw_path: str
    ) -> tuple[EntryArray, dict[str, Any]] | None:
        """The entry array and the entry that ``raw_path`` names in ``output``, else None.

        ``logs[2]`` names entry 2 of ``logs``; ``traces[0].spans[3]`` entry 3 of the ``spans``
        inside entry 0 of ``traces``.
        """
        arrays = self.arrays
        current: Mapping[str, object] | None = output
        found: tuple[EntryArray, dict[str, Any]] | None = None
        for step in raw_path.split("."):
            name, bracket, rest = step.partition("[")
            digits = rest[:-1]
            well_formed = bracket and rest.endswith("]") and digits.isascii() and digits.isdigit()
            if not well_formed or current is None:
                return None
            array = next((a for a in arrays if a.name == name), None)
            listed = current.get(name) if array is not None else None
            index = int(digits)
            if array is None or not isinstance(listed, list) or index >= len(listed):
                return None
            entry = listed[index]
            if not isinstance(entry, dict):
                return None
            found = (array, entry)
            current, arrays = entry, array.within
        return found

    def source_type(self, raw_path: str) -> str | None:
        """The ``source_type`` of the ref at a raw path (``summary`` for the summary ref)."""
        if raw_path == "summary":
            return "summary"
        arrays = self.arrays
        found: EntryArray | None = None
        for step in raw_path.split("."):
            match = _PATH_STEP.fullmatch(step)
            found = next((a for a in arrays if match and a.name == match["array"]), None)
            if found is None:
                return None
            arrays = found.within
        return found.source_type if found is not None else None

    @cached_property
    def trace_parts(self) -> Callable[[Invocation], Iterable[str]]:
        """The output summary parts of an ok call (``Trace.parts``, else each entry's text)."""
        return self.trace.parts or self._default_parts

    def _default_parts(self, invocation: Invocation) -> Iterable[str]:
        output = invocation["output"]
        shown = False
        for array in self.arrays:
            for entry in entries_of(output, array.name):
                shown = True
                yield array.render(entry)
        if not shown:
            yield "no " + " or ".join(array.name for array in self.arrays)

    @cached_property
    def trace_floor(self) -> Callable[[Invocation], str]:
        """The shortest summary of an ok call (``Trace.floor``, else ``<n> <array>, ...``)."""
        return self.trace.floor or self._default_floor

    def _default_floor(self, invocation: Invocation) -> str:
        output = invocation["output"] or {}
        counts = [(output.get(name), name) for name in self._array_names]
        return ", ".join([f"{len(n) if isinstance(n, list) else 0} {name}" for n, name in counts])

    @cached_property
    def trace_effective(self) -> Callable[[Invocation], bool]:
        """Whether an ok call is an effective hit (``Trace.effective``, else it has entries)."""
        return self.trace.effective or self._has_entries

    @cached_property
    def _array_names(self) -> tuple[str, ...]:
        return tuple(array.name for array in self.arrays)

    def _has_entries(self, invocation: Invocation) -> bool:
        output = invocation["output"]
        if output is None:
            return False
        for name in self._array_names:
            listed = output.get(name)
            if isinstance(listed, list) and listed:
                return True
        return False
