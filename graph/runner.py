"""Running one diagnosis on a compiled graph: new question or resume, with audit bookkeeping.

Callers hold the thread's writer lock (``Persistence.thread_lock``) around ``run_diagnosis``, so
any diagnosis of the thread still marked ``running`` when a new question starts belongs to a run
that died: it is marked ``abandoned``. A resumed run is noted as such; a run that fails is marked
``failed``; an interrupted one (Ctrl-C) stays resumable.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph

from persistence.audit import AuditStore
from state.context import Context
from state.graph_state import DiagnosisState, InputState, OutputState
from state.records import DiagnosisStatus, DiagnosisSummary, GatekeeperBrief
from verification.text import error_line


class NothingToResume(ValueError):
    """The thread has no interrupted diagnosis."""


Graph = CompiledStateGraph[DiagnosisState, Context, InputState, OutputState]
"""A compiled diagnosis graph."""


def state_of(app: Graph, config: RunnableConfig) -> DiagnosisState:
    """The thread's current state (what the graph's own nodes wrote)."""
    return cast(DiagnosisState, app.get_state(config).values)


def run_diagnosis(
    app: Graph,
    *,
    thread_id: str,
    context: Context,
    audit: AuditStore,
    question: str | None = None,
    resume: bool = False,
    on_event: Callable[[dict[str, object]], None] | None = None,
) -> DiagnosisState:
    """Run (or resume) the thread's diagnosis to the end and return the final state values.

    Raises:
        NothingToResume: when ``resume`` is set and the thread has nothing interrupted.
    """
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    payload: InputState | None
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
        payload = InputState(messages=[HumanMessage(question or "")])
    try:
        for chunk in app.stream(payload, config, context=context, stream_mode="custom"):
            if on_event is not None and isinstance(chunk, dict):
                on_event(chunk)
    except KeyboardInterrupt:
        _note(app, config, audit, None, "interrupted; resume with --resume --thread " + thread_id)
        raise
    except Exception as exc:
        _note(app, config, audit, "failed", f"failed: {error_line(exc)}")
        raise
    return state_of(app, config)


def _note(
    app: Graph,
    config: RunnableConfig,
    audit: AuditStore,
    status: DiagnosisStatus | None,
    note: str,
) -> None:
    try:
        diagnosis_id = state_of(app, config).get("diagnosis_id")
        if diagnosis_id and (record := audit.get(str(diagnosis_id))) is not None:
            if record["status"] == "running":
                audit.mark(str(diagnosis_id), status=status, note=note)
    except Exception:  # bookkeeping must never hide the original error
        return


def summary_of(values: DiagnosisState, thread_id: str) -> DiagnosisSummary:
    """The result object the CLI prints with ``--json`` (and the API returns)."""
    gate = values.get("gatekeeper_result")
    result = values.get("verifier_result")
    return DiagnosisSummary(
        diagnosis_id=values.get("diagnosis_id"),
        thread_id=thread_id,
        verdict=values.get("verdict"),
        model_verdict=result["model_verdict"] if result is not None else None,
        groundedness_score=values.get("groundedness_score"),
        rounds=values.get("round"),
        offline=values["run_info"]["offline"] if "run_info" in values else False,
        answer=values.get("answer"),
        gatekeeper=GatekeeperBrief(
            status=gate["status"] if gate else None,
            severity=gate["severity"] if gate else None,
            failed_rules=gate["failed_rules"] if gate else [],
        ),
    )
