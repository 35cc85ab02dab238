"""Small helpers shared by the node factories."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.config import get_config, get_stream_writer
from langgraph.constants import TAG_NOSTREAM
from langgraph.runtime import Runtime

from nodes.messages import as_reply, content_chars
from nodes.recording import MAX_RECORDED_CALLS, call_record
from state.context import Context, setting_names
from state.graph_state import DiagnosisState
from state.json_shape import is_number
from state.records import ModelCallRecord, ModelUsage, add_usage

GetModel = Callable[[str, Context], BaseChatModel]
"""Model factory handed to node factories: ``get_model(role, context)``."""

INTERNAL_CALL: RunnableConfig = {"tags": [TAG_NOSTREAM]}
"""Config of every model call inside the graph: never streamed to a chat client (the
``messages`` stream modes), whose only text is the composed, verified answer."""


DEADLINE_KEY = "superbiz_deadline"
"""Config metadata key of a model call: the diagnosis deadline (epoch seconds), read by the
retry layer so that no retry waits past it."""
RESUMED_AT_KEY = "superbiz_resumed_at"
"""``configurable`` key a resuming caller sets (epoch seconds): the deadline counts from it."""


class Spend:
    """The model budget of one node visit: what the diagnosis spent before, what this node adds.

    ``invoke`` calls a model with the internal config (not streamed, carrying the deadline) and
    counts the call and the tokens the endpoint reported; ``stop`` says which budget is spent,
    if any. Offline rule-based models are not counted: they call nothing. Each counted call is
    also recorded in ``calls`` (``nodes.recording``: what a replay needs), which the node returns
    as ``model_calls``.
    """

    def __init__(self, state: DiagnosisState, ctx: Context) -> None:
        self._ctx = ctx
        self._before = state.get("usage") or ModelUsage(calls=0, input_tokens=0, output_tokens=0)
        self._round = int(state.get("round") or 1)
        self._recorded = len(state.get("model_calls") or [])
        self.added = ModelUsage(calls=0, input_tokens=0, output_tokens=0)
        self.calls: list[ModelCallRecord] = []
        started = float(state.get("started_at") or time.time())
        resumed = _configurable().get(RESUMED_AT_KEY)
        if is_number(resumed):
            started = max(started, float(resumed))
        self.deadline = started + ctx.diagnosis_deadline_s
        self.config: RunnableConfig = {
            "tags": [TAG_NOSTREAM],
            "metadata": {DEADLINE_KEY: self.deadline},
        }

    @property
    def total(self) -> ModelUsage:
        """What the diagnosis has spent, this node included."""
        return add_usage(self._before, self.added)

    def stop(self) -> str | None:
        """Which budget is spent (one line), or None while the diagnosis may call a model."""
        ctx, total = self._ctx, self.total
        if total["calls"] >= ctx.max_model_calls:
            return (
                f"the budget of {ctx.max_model_calls} model calls per diagnosis was reached "
                "(SUPERBIZ_MAX_MODEL_CALLS)"
            )
        if ctx.max_input_tokens and total["input_tokens"] >= ctx.max_input_tokens:
            return (
                f"the budget of {ctx.max_input_tokens} input tokens per diagnosis was reached "
                "(SUPERBIZ_MAX_INPUT_TOKENS)"
            )
        if ctx.max_output_tokens and total["output_tokens"] >= ctx.max_output_tokens:
            return (
                f"the budget of {ctx.max_output_tokens} output tokens per diagnosis was reached "
                "(SUPERBIZ_MAX_OUTPUT_TOKENS)"
            )
        if time.time() >= self.deadline:
            return (
                f"the diagnosis deadline of {ctx.diagnosis_deadline_s:g} s was reached "
                "(SUPERBIZ_DIAGNOSIS_DEADLINE_S)"
            )
        return None

    def invoke(self, model: Runnable[Any, Any], messages: Sequence[BaseMessage]) -> AIMessage:
        """Call ``model`` and count what the call cost; its answer as a reply (``as_reply``)."""
        reply = as_reply(model.invoke(list(messages), config=self.config))
        if not getattr(model, "offline", False):
            usage = getattr(reply, "usage_metadata", None) or {}
            self.added = add_usage(
                self.added,
                ModelUsage(
                    calls=1,
                    input_tokens=int(usage.get("input_tokens") or 0),
                    output_tokens=int(usage.get("output_tokens") or 0),
                    input_chars=content_chars(messages),
                ),
            )
            if self._recorded + len(self.calls) < MAX_RECORDED_CALLS:
                self.calls.append(
                    call_record(
                        reply,
                        role=_node_name(),
                        round=self._round,
                        record_replies=self._ctx.record_model_replies,
                    )
                )
        return reply


def _node_name() -> str:
    """The graph node making the current call (its role: planner, executor, ...)."""
    try:
        metadata = get_config().get("metadata") or {}
    except RuntimeError:
        return "model"
    return str(metadata.get("langgraph_node") or "model")


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


def model_label(model: BaseChatModel) -> str:
    """A label naming the model for audit (offline models say so)."""
    for attr in ("model_name", "model"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value
    return model._llm_type


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
