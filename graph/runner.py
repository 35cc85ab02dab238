"""Running one diagnosis on a compiled graph: a new question or a resume.

A graph compiled by ``graph/compile.py`` holds the thread's writer lock for the run and does the
audit bookkeeping of how it ends (``graph/guard.py``): a run that fails is recorded ``failed``
with a degraded answer (``graph/failures.py``); an interrupted one (Ctrl-C) stays resumable; the
intake node marks a diagnosis of the thread that was left ``running`` by a run that died as
``abandoned``. Whether a thread has a run to resume is read from its last checkpoint
(``graph/saved_run.py``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator
from typing import cast

from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph.state import CompiledStateGraph

from graph.failures import DiagnosisFailed, failure_of
from graph.saved_run import SavedRun, read_saved_run
from models.budget import RESUMED_AT_KEY
from persistence.audit import AuditStore
from persistence.locks import ThreadBusy
from state.context import Context
from state.graph_state import DiagnosisState, InputState, OutputState
from state.records import DiagnosisSummary, GatekeeperBrief

__all__ = [
    "DiagnosisFailed",
    "Graph",
    "NothingToResume",
    "RunStopped",
    "run_diagnosis",
    "saved_run",
    "state_of",
    "summary_of",
]


class NothingToResume(ValueError):
    """The thread has no interrupted diagnosis."""


class RunStopped(Exception):
    """The caller asked the run to stop (``stop`` was set); it stays resumable, as after Ctrl-C."""


Graph = CompiledStateGraph[DiagnosisState, Context, InputState, OutputState]
"""A compiled diagnosis graph."""


def state_of(app: Graph, config: RunnableConfig) -> DiagnosisState:
    """The thread's current state (what the graph's own nodes wrote)."""
    return cast(DiagnosisState, app.get_state(config).values)


def saved_run(app: Graph, thread_id: str) -> SavedRun:
    """The thread's run as the last checkpoint of the graph's checkpointer left it."""
    checkpointer = app.checkpointer
    if not isinstance(checkpointer, BaseCheckpointSaver):
        return SavedRun(thread_id)
    return read_saved_run(checkpointer, thread_id)


def run_diagnosis(
    app: Graph,
    *,
    thread_id: str,
    context: Context,
    audit: AuditStore,
    question: str | None = None,
    message_id: str | None = None,
    resume: bool = False,
    on_event: Callable[[dict[str, object]], None] | None = None,
    stop: threading.Event | None = None,
) -> DiagnosisState:
    """Run (or resume) the thread's diagnosis to the end and return the final state values.

    The graph guards the run itself (``graph/guard.py``): it takes the thread's lock, leases the
    diagnosis and records a failure, a cancellation or an interruption on it; ``audit`` is the
    store those records go to (the graph was built with it).

    ``message_id`` fixes the question message's id, and so the diagnosis id (the alert
    receiver answers with it before the run starts).

    ``stop``, once set, ends the run at its next progress event the way Ctrl-C ends the
    command line's: the graph sees a ``KeyboardInterrupt``, so the guard notes the diagnosis as
    interrupted (resumable from its last checkpoint) and gives the thread back.

    Raises:
        NothingToResume: when ``resume`` is set and the thread has nothing interrupted.
        ThreadBusy: when another run holds the thread.
        DiagnosisFailed: when the run fails; the diagnosis is then recorded ``failed``.
        RunStopped: when ``stop`` was set before the run ended.
    """
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    payload: InputState | None
    if resume:
        saved = saved_run(app, thread_id)
        if not saved.next:
            raise NothingToResume(
                f"thread {thread_id!r} has no interrupted diagnosis to resume"
                + (" (its last diagnosis finished)" if saved.values else "")
            )
        config["configurable"][RESUMED_AT_KEY] = time.time()  # the deadline counts anew
        payload = None
    else:
        payload = InputState(messages=[HumanMessage(question or "", id=message_id)])
    # A generator (``Pregel.stream``), typed as an iterator: ``throw`` ends it like Ctrl-C.
    stream = cast(
        Generator[object, None, None],
        app.stream(payload, config, context=context, stream_mode="custom"),
    )
    try:
        for chunk in stream:
            if on_event is not None and isinstance(chunk, dict):
                on_event(chunk)
            if stop is not None and stop.is_set():
                try:
                    stream.throw(KeyboardInterrupt())
                except KeyboardInterrupt:
                    pass
                raise RunStopped(f"the diagnosis on thread {thread_id!r} was stopped")
    except (ThreadBusy, KeyboardInterrupt, RunStopped):
        raise
    except Exception as exc:
        try:
            values = state_of(app, config)
        except Exception:  # the database went away with the run: say what ended it
            values = cast(DiagnosisState, {})
        raise failure_of(values, context, exc) from exc
    return state_of(app, config)


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
        root_cause=values.get("root_cause"),
        suspects=list(values.get("suspects") or []),
    )
