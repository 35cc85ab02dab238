"""The registry of tool specs: every tool the product offers, one registration line each.

The runner, refs, trace summary, executor, replay, offline rules and web page look tools up here
and know none by name. A tool created at run time (e.g. from a third-party server's tool list)
is registered the same way, or for a block with ``registered(...)``. Registration order is the
order the model is offered the tools in.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from state.records import JSONObject
from tools import (
    analyze_incident,
    get_current_time,
    lookup_knowledge,
    query_logs,
    query_metrics,
    query_traces,
)
from tools.spec import EntryArray, ToolSpec

_lock = threading.Lock()
_specs: dict[str, ToolSpec] = {}
_offered: list[JSONObject] | None = None


def register(spec: ToolSpec) -> None:
    """Add a tool.

    Raises:
        ValueError: When a tool of that name is registered already.
    """
    global _offered
    with _lock:
        if spec.name in _specs:
            raise ValueError(f"a tool named {spec.name} is registered already")
        _specs[spec.name] = spec
        _offered = None


def unregister(name: str) -> None:
    """Remove a tool (nothing happens when none has that name)."""
    global _offered
    with _lock:
        _specs.pop(name, None)
        _offered = None


@contextmanager
def registered(*specs: ToolSpec) -> Iterator[None]:
    """Register tools for the duration of a block, then remove them again."""
    done: list[str] = []
    try:
        for spec in specs:
            register(spec)
            done.append(spec.name)
        yield
    finally:
        for name in reversed(done):
            unregister(name)


def spec_of(name: str) -> ToolSpec | None:
    """The spec of a registered tool, else None."""
    return _specs.get(name)


def specs() -> tuple[ToolSpec, ...]:
    """Every registered tool, in registration order."""
    with _lock:
        return tuple(_specs.values())


def names() -> tuple[str, ...]:
    """The names of every registered tool, in registration order."""
    return tuple(spec.name for spec in specs())


def is_evidence(name: str) -> bool:
    """Whether a tool's results are citable evidence (incident or guidance); unknown: no."""
    spec = _specs.get(name)
    return spec is not None and spec.evidence


def is_guidance(name: str) -> bool:
    """Whether a tool's refs are guidance only, never evidence about the incident."""
    spec = _specs.get(name)
    return spec is not None and spec.guidance


def planned_offline(name: str) -> bool:
    """Whether the offline rules may put a call of this tool in a plan."""
    spec = _specs.get(name)
    return spec is not None and spec.planned_offline


def tool_specs() -> list[JSONObject]:
    """OpenAI-style function tool specs of every registered tool, for ``bind_tools``.

    Returns:
        One ``{"type": "function", "function": {"name", "description", "parameters"}}`` per
        tool, in registration order (evidence tools first).
    """
    global _offered
    with _lock:
        if _offered is None:
            _offered = [spec.openai_tool() for spec in _specs.values()]
        offered = _offered
    return copy.deepcopy(offered)


def offered(backend: object) -> list[JSONObject]:
    """The tool specs offered over ``backend``: each tool whose evidence it serves.

    A tool that ``needs`` a kind of evidence is offered only when the backend's
    ``evidence_kinds()`` names it; a backend without that method serves every tool.
    """
    kinds = getattr(backend, "evidence_kinds", None)
    if not callable(kinds):
        return tool_specs()
    served = set(kinds())
    kept = [spec for spec in specs() if spec.needs is None or spec.needs in served]
    return [copy.deepcopy(spec.openai_tool()) for spec in kept]


def _array_display(array: EntryArray) -> JSONObject:
    shown: JSONObject = {
        "name": array.name,
        "source_type": array.source_type,
        "kind": array.display.kind,
        "fields": list(array.display.fields),
    }
    if array.within:
        shown["within"] = [_array_display(inner) for inner in array.within]
    return shown


def display_data() -> JSONObject:
    """What the web page needs to show each tool's entries: ``{"tools": {name: {...}}}``.

    Per tool: its ``role`` and its ``arrays`` (``name``, ``source_type``, display ``kind``,
    ``fields`` shown, and the arrays ``within`` an entry).
    """
    return {
        "tools": {
            spec.name: {
                "role": spec.role,
                "arrays": [_array_display(array) for array in spec.arrays],
            }
            for spec in specs()
        }
    }


register(query_logs.SPEC)
register(query_metrics.SPEC)
register(query_traces.SPEC)
register(analyze_incident.SPEC)
register(lookup_knowledge.SPEC)
register(get_current_time.SPEC)
