"""The model budget of a diagnosis, and what every model call inside the graph carries.

``Spend`` counts one node visit's model calls and tokens against the run's budgets (calls,
input and output tokens, the deadline) and records each call for replay.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.config import get_config
from langgraph.constants import TAG_NOSTREAM

from models.messages import as_reply, content_chars
from models.recording import MAX_RECORDED_CALLS, call_record
from state.context import Context
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

    def supersede_last(self) -> None:
        """Mark the last recorded call as superseded (its node asks again and uses the next)."""
        if self.calls:
            self.calls[-1]["superseded"] = True

    def invoke(
        self,
        model: Runnable[Any, Any],
        messages: Sequence[BaseMessage],
        *,
        read: Callable[[AIMessage], AIMessage] | None = None,
    ) -> AIMessage:
        """Call ``model`` and count what the call cost; its answer as a reply (``as_reply``).

        Args:
            model: the model (or a model with tools or options bound).
            messages: what it is sent.
            read: how the node reads the reply before it is recorded (the executor reads tool
                calls written in the text, ``models.text_tool_calls``).
        """
        reply = as_reply(model.invoke(list(messages), config=self.config))
        if read is not None:
            reply = read(reply)
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
                        max_tokens=output_limit(model),
                    )
                )
        return reply


def output_limit(model: Runnable[Any, Any]) -> int | None:
    """The ``max_tokens`` a model (or a model with options bound) sends, if any."""
    bound = getattr(model, "bound", model)
    limit = getattr(model, "kwargs", {}).get("max_tokens") or getattr(bound, "max_tokens", None)
    return limit if isinstance(limit, int) else None


def _node_name() -> str:
    """The graph node making the current call (its role: planner, executor, ...)."""
    try:
        metadata = get_config().get("metadata") or {}
    except RuntimeError:
        return "model"
    return str(metadata.get("langgraph_node") or "model")


def model_label(model: BaseChatModel) -> str:
    """A label naming the model for audit (offline models say so)."""
    for attr in ("model_name", "model"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value
    return model._llm_type


def _configurable() -> dict[str, Any]:
    try:
        return dict(get_config().get("configurable") or {})
    except RuntimeError:
        return {}
