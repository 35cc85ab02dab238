"""Running one diagnosis on a compiled graph: new question or resume, with audit bookkeeping.

Callers hold the thread's writer lock (``Persistence.thread_lock``) around ``run_diagnosis``, so
any diagnosis of the thread still marked ``running`` when a new question starts belongs to a run
that died: it is marked ``abandoned``. A resumed run is noted as such; a run that fails is marked
``failed``; an interrupted one (Ctrl-C) stays resumable.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph

from persistence.audit import AuditStore
from state.context import Context


class NothingToResume(ValueError):
    """The thread has no interrupted diagnosis."""


def _one_line(exc: BaseException) -> str:
    message = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def run_diagnosis(
    app: CompiledStateGraph[Any, Context, Any, Any],
    *,
    thread_id: str,
    context: Context,
    audit: AuditStore,
    question: str | None = None,
    resume: bool = False,
    on_event: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run (or resume) the thread's diagnosis to the end and return the final state values.

    Raises:
        NothingToResume: when ``resume`` is set and the thread has nothing interrupted.
    """
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    payload: dict[str, Any] | None
    if resume:
        snapshot = app.get_state(config)
        if not snapshot.next:
            raise NothingToResume(
                f"thread {thread_id!r} has no interrupted diagnosis to resume"
                + (" (its last diagnosis finished)" if snapshot.values else "")
            )
        diagnosis_id = snapshot.values.get("diagnosis_id")
        if diagnosis_id:
            audit.mark(str(diagnosis_id), status="running", note="resumed after an interrupted run")
        payload = None
    else:
        audit.abandon_running(thread_id)
        payload = {"messages": [HumanMessage(question or "")]}
    try:
        for chunk in app.stream(payload, config, context=context, stream_mode="custom"):
            if on_event is not None and isinstance(chunk, dict):
                on_event(chunk)
    except KeyboardInterrupt:
        _note(app, config, audit, None, "interrupted; resume with --resume --thread " + thread_id)
        raise
    except Exception as exc:
        _note(app, config, audit, "failed", f"failed: {_one_line(exc)}")
        raise
    values: dict[str, Any] = app.get_state(config).values
    return values


def _note(
    app: CompiledStateGraph[Any, Context, Any, Any],
    config: RunnableConfig,
    audit: AuditStore,
    status: str | None,
    note: str,
) -> None:
    try:
        diagnosis_id = app.get_state(config).values.get("diagnosis_id")
        if diagnosis_id and (record := audit.get(str(diagnosis_id))) is not None:
            if record["status"] == "running":
                audit.mark(str(diagnosis_id), status=status, note=note)
    except Exception:  # bookkeeping must never hide the original error
        return


def summary_of(values: dict[str, Any], thread_id: str, *, offline: bool) -> dict[str, Any]:
    """The result object the CLI prints with ``--json`` (and the API returns)."""
    gate = values.get("gatekeeper_result") or {}
    return {
        "diagnosis_id": values.get("diagnosis_id"),
        "thread_id": thread_id,
        "verdict": values.get("verdict"),
        "model_verdict": (values.get("verifier_result") or {}).get("model_verdict"),
        "groundedness_score": values.get("groundedness_score"),
        "rounds": values.get("round"),
        "offline": offline,
        "answer": values.get("answer"),
        "gatekeeper": {
            "status": gate.get("status"),
            "severity": gate.get("severity"),
            "failed_rules": gate.get("failed_rules", []),
        },
    }
