"""Small helpers shared by the node factories."""

from __future__ import annotations

import json
from typing import Any, Protocol

from langgraph.config import get_config, get_stream_writer
from langgraph.runtime import Runtime

from state.context import Context, setting_names
from state.graph_state import DiagnosisState


def context_of(runtime: Runtime[Context] | None) -> Context:
    """The run's ``Context``: the one passed by the caller, or defaults from the environment.

    A mapping (a LangGraph context or, without one, the settings among the run config's
    ``configurable`` keys) is checked by the run-setting rules; unknown keys of a context are
    reported. (The LangGraph server itself drops context keys its schema does not list before
    a run starts.)

    Raises:
        SettingsError: for an unknown key or a value a setting does not allow.
    """
    ctx: Any = getattr(runtime, "context", None)
    if isinstance(ctx, Context):
        return ctx
    if isinstance(ctx, dict):
        return Context(**ctx)
    names = set(setting_names())
    configurable = _configurable()
    return Context(**{k: v for k, v in configurable.items() if k in names})


def _configurable() -> dict[str, Any]:
    try:
        return dict(get_config().get("configurable") or {})
    except RuntimeError:
        return {}


def thread_id() -> str:
    """The LangGraph thread id of the current run, or ``"-"`` without a checkpointer."""
    try:
        configurable = get_config().get("configurable", {})
    except RuntimeError:
        return "-"
    value = configurable.get("thread_id")
    return str(value) if value is not None else "-"


def emit(stage: str, **fields: Any) -> None:
    """Send a progress event on the ``custom`` stream (a no-op when nobody listens)."""
    try:
        writer = get_stream_writer()
    except RuntimeError:
        return
    writer({"stage": stage, **fields})


def dumps(data: object) -> str:
    """Compact JSON text that keeps non-ASCII characters readable."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)


class Node(Protocol):
    """A graph node: reads the state and the run's context, returns the keys it changes."""

    def __call__(
        self, state: DiagnosisState, *, runtime: Runtime[Context]
    ) -> DiagnosisState | dict[str, object]:
        """Run the node."""
        ...
