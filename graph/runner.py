"""Running one diagnosis on a compiled graph: new question or resume, with audit bookkeeping.

Callers hold the thread's writer lock (``Persistence.thread_lock``) around ``run_diagnosis``, so
any diagnosis of the thread still marked ``running`` when a new question starts belongs to a run
that died: it is marked ``abandoned``. A resumed run is noted as such; a run that fails is marked
``failed``; an interrupted one (Ctrl-C) stays resumable.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import cast

from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph

from graph.model_calls import ModelCallFailed
from nodes.audit import usage_record
from nodes.common import RESUMED_AT_KEY
from persistence.audit import AuditStore
from state.context import Context
from state.graph_state import DiagnosisState, InputState, OutputState
from state.records import (
    DiagnosisOutcome,
    DiagnosisStatus,
    DiagnosisSummary,
    FailureRecord,
    GatekeeperBrief,
)
from verification.answer import failed_answer
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
        DiagnosisFailed: when the run fails; the diagnosis is then recorded ``failed``.
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
        config["configurable"][RESUMED_AT_KEY] = time.time()  # the deadline counts anew
        payload = None
    else:
        audit.abandon_running(thread_id)
        payload = InputState(messages=[HumanMessage(question or "")])
    try:
        for chunk in app.stream(payload, config, context=context, stream_mode="custom"):
            if on_event is not None and isinstance(chunk, dict):
                on_event(chunk)
    except KeyboardInterrupt:
        note_interrupted(app, thread_id, audit)
        raise
    except Exception as exc:
        raise _failed(app, config, audit, context, exc) from exc
    return state_of(app, config)


class DiagnosisFailed(RuntimeError):
    """A diagnosis could not finish; it is recorded ``failed`` with the reason.

    Attributes:
        reason: one line saying what went wrong and, where it can, what to fix.
        answer: the degraded answer the user gets (it says the diagnosis could not finish).
        diagnosis_id: the failed diagnosis, when it had started.
        cause: the exception that ended it (``ModelCallFailed`` for a model endpoint).
    """

    def __init__(
        self, reason: str, answer: str, diagnosis_id: str | None, cause: BaseException
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.answer = answer
        self.diagnosis_id = diagnosis_id
        self.cause = cause


def failure_reason(exc: BaseException) -> str:
    """The one-line reason of a failed run."""
    return exc.reason if isinstance(exc, ModelCallFailed) else error_line(exc)


def _failed(
    app: Graph, config: RunnableConfig, audit: AuditStore, context: Context, exc: Exception
) -> DiagnosisFailed:
    """Record the failure (status, reason, partial audit, degraded answer) as far as possible."""
    reason = failure_reason(exc)
    diagnosis_id: str | None = None
    answer = failed_answer(reason, context.language, None)
    try:
        values = state_of(app, config)
        diagnosis_id = values.get("diagnosis_id")
        answer = failed_answer(reason, context.language, diagnosis_id)
        record = audit.get(str(diagnosis_id)) if diagnosis_id else None
        if diagnosis_id and record is not None and record["status"] == "running":
            audit.update_channel(
                diagnosis_id,
                "failure",
                FailureRecord(
                    reason=reason,
                    error_type=type(exc).__name__,
                    round=values.get("round", 1),
                    route=list(values.get("route", [])),
                ),
            )
            audit.update_channel(diagnosis_id, "usage", usage_record(values, context))
            audit.finish_diagnosis(
                diagnosis_id,
                DiagnosisOutcome(
                    status="failed",
                    rounds=values.get("round", 1),
                    verdict=None,
                    score=None,
                    answer=answer,
                ),
            )
            audit.mark(diagnosis_id, note=f"failed: {reason}")
    except Exception:  # bookkeeping must never hide the original error
        pass
    return DiagnosisFailed(reason, answer, diagnosis_id, exc)


def note_interrupted(app: Graph, thread_id: str, audit: AuditStore) -> None:
    """Note on the thread's running diagnosis that it was interrupted and can be resumed."""
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    _note(app, config, audit, None, "interrupted; resume with --resume --thread " + thread_id)


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
