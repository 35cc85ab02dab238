"""The graph guards its own runs: one writer per thread, and no diagnosis left ``running``.

``RunGuardHandler`` is a LangChain callback handler that ``graph/compile.py`` binds to the
compiled graph (``Pregel.with_config(callbacks=[...])``, which keeps the compiled graph a plain
``CompiledStateGraph``). Every run of the graph, whoever starts it (the command line, the HTTP
API, the LangGraph server, the evaluation, the sweeper) and however (``invoke``, ``stream``, their
async forms, the event streams), starts and ends the graph's root run, and there the handler:

- takes the thread's writer lock before the first node runs, or refuses the run (``ThreadBusy``,
  raised out of the run's start: the handler sets ``raise_error``);
- on a resume (no new input), takes the lease of the diagnosis it resumes and notes the resume on
  its record (a new question's diagnosis is leased by the intake node when it starts it); the
  diagnosis is read from the thread's last checkpoint (``graph/saved_run.py``);
- when the run leaves, however it leaves, records how on the diagnosis (``failed`` with the
  reason, the partial audit and a degraded answer for an error, ``graph/failures.py``; ``failed``
  for a cancellation; a note with the resume command for Ctrl-C, which leaves it resumable),
  gives back the leases and releases the lock.

The handler tells the graph's root run from the runs inside it by their parents: every node,
chain and tool run of a guarded run descends from its root, and the handler, inherited by all of
them, keeps their ids until the root ends. A run started without a ``thread_id`` (no
checkpointer) has no thread to guard and runs as is.

A process that is killed cannot do the last step: its lock dies with it (PostgreSQL connection,
SQLite row of a dead pid) and its lease expires, which is what the sweeper looks for.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from typing import Any, cast
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langgraph.checkpoint.base import BaseCheckpointSaver

from graph.failures import record_failure
from graph.saved_run import SavedRun, read_saved_run
from persistence.audit import AuditStore
from persistence.runs import RunLocks
from state.context import Context
from state.graph_state import DiagnosisState
from state.records import DiagnosisRecord, DiagnosisStatus
from state.run_settings import RunSettings, context_from_settings

logger = logging.getLogger("superbiz.guard")

OpenCheckpointer = Callable[[], AbstractContextManager[BaseCheckpointSaver[Any]]]
"""Opens (for a block) the checkpointer that holds the graph's threads."""

RESUMED_NOTE = "resumed after an interrupted run"


def interrupted_note(thread_id: str) -> str:
    """The note of a run the user interrupted (it stays resumable)."""
    return f"interrupted; resume with superbiz diagnose --resume --thread {thread_id}"


def cancelled_note(thread_id: str) -> str:
    """The note of a run that was cancelled before it finished."""
    return (
        "failed: the run was cancelled before it finished; resume it with superbiz diagnose "
        f"--resume --thread {thread_id} or POST /api/diagnoses/<id>/resume"
    )


class RunGuard:
    """What the graph does when a run enters and leaves it.

    Args:
        locks: The thread locks and diagnosis leases.
        audit: Where the diagnosis records are.
    """

    def __init__(self, locks: RunLocks, audit: AuditStore) -> None:
        self.locks = locks
        self.audit = audit

    def enter(self, thread_id: str) -> ExitStack:
        """Take the thread's lock (blocking).

        Raises:
            ThreadBusy: when another run holds the thread.
        """
        stack = ExitStack()
        stack.enter_context(self.locks.hold(thread_id))
        stack.callback(self.locks.release, thread_id)
        return stack

    def resumed(self, thread_id: str, diagnosis_id: str) -> None:
        """Lease the diagnosis a resume continues, and note the resume on its record."""
        record = self.audit.get(diagnosis_id)
        if record is None or record["status"] in ("done", "abandoned"):
            return  # not started yet (intake leases it), or not this resume's to reopen
        self.locks.lease(diagnosis_id, thread_id)
        self.audit.mark(diagnosis_id, status="running", note=RESUMED_NOTE)

    def left(
        self,
        thread_id: str,
        exc: BaseException | None,
        values: Callable[[], DiagnosisState] | None = None,
        context: Context | None = None,
    ) -> None:
        """Record how the run left on its diagnosis (nothing for a run that finished).

        An error is recorded by ``graph.failures.record_failure`` (``failed``, the reason, the
        partial audit and a degraded answer), from the run's state ``values()`` when given, with
        the run's ``context``, by default the settings stored with the diagnosis.
        """
        diagnosis_id = self.locks.current(thread_id)
        if exc is None or diagnosis_id is None:
            return
        try:
            if isinstance(exc, KeyboardInterrupt):
                self.note(diagnosis_id, None, interrupted_note(thread_id))
            elif isinstance(exc, asyncio.CancelledError | GeneratorExit):
                self.note(diagnosis_id, "failed", cancelled_note(thread_id))
            else:
                state = values() if values is not None else cast(DiagnosisState, {})
                if context is None:
                    context = stored_context(self.audit.get(diagnosis_id))
                record_failure(state, diagnosis_id, self.audit, context, exc)
        except Exception:  # bookkeeping must never hide the original error
            return

    def note(self, diagnosis_id: str, status: DiagnosisStatus | None, note: str) -> None:
        """Note how a running diagnosis stopped (a finished one is left as it is)."""
        record = self.audit.get(diagnosis_id)
        if record is not None and record["status"] == "running":
            self.audit.mark(diagnosis_id, status=status, note=note)


def stored_context(record: DiagnosisRecord | None) -> Context | None:
    """The run settings a diagnosis was started with, when its record holds readable ones."""
    settings = record["run_settings"] if record is not None else None
    if not settings:
        return None
    try:
        return context_from_settings(cast(RunSettings, settings))
    except (TypeError, ValueError):
        return None


def is_resume(payload: Any) -> bool:
    """Whether a run's input continues the thread's saved run (no new question)."""
    return payload is None or not isinstance(payload, Mapping)


@dataclass
class _GuardedRun:
    """A root run the handler holds the thread for."""

    thread_id: str
    stack: ExitStack


class RunGuardHandler(BaseCallbackHandler):
    """The run guard, as the callback handler every run of the compiled graph carries.

    Args:
        guard: What a run does when it enters and leaves (locks and records).
        checkpoints: Opens the checkpointer holding the graph's threads, to read the diagnosis a
            resume continues and the state a failed run left; None when the graph has none.
    """

    raise_error = True
    """A refused run (``ThreadBusy``) is raised out of its start, before any node runs."""

    def __init__(self, guard: RunGuard, checkpoints: OpenCheckpointer | None) -> None:
        self.guard = guard
        self.checkpoints = checkpoints
        self._lock = threading.Lock()
        self._roots: dict[UUID, _GuardedRun] = {}
        self._inside: dict[UUID, UUID] = {}
        """Runs inside a guarded root (nodes, chains, tools), by id: their root's id."""

    # Model, retriever, retry and custom events say nothing about where a run starts or ends.
    @property
    def ignore_llm(self) -> bool:
        """Model runs are leaves: nothing to track."""
        return True

    @property
    def ignore_chat_model(self) -> bool:
        """Chat model runs are leaves: nothing to track."""
        return True

    @property
    def ignore_retriever(self) -> bool:
        """Retriever runs are leaves: nothing to track."""
        return True

    @property
    def ignore_retry(self) -> bool:
        """Retries are not runs."""
        return True

    @property
    def ignore_custom_event(self) -> bool:
        """Custom events (the progress events of the nodes) are not runs."""
        return True

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Track a run inside a guarded one; or, for a root run on a thread, enter the guard.

        Raises:
            ThreadBusy: when another run holds the thread.
        """
        if self._joined(run_id, parent_run_id):
            return
        thread = (metadata or {}).get("thread_id")
        if thread is None:
            return
        thread_id = str(thread)
        stack = self.guard.enter(thread_id)
        try:
            if is_resume(inputs):
                checkpoint = (metadata or {}).get("checkpoint_id")
                saved = self._saved(thread_id, str(checkpoint) if checkpoint else None)
                diagnosis_id = saved.resumed_diagnosis_id()
                if diagnosis_id:
                    self.guard.resumed(thread_id, diagnosis_id)
        except BaseException:
            stack.close()
            raise
        with self._lock:
            self._roots[run_id] = _GuardedRun(thread_id, stack)

    def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """Track a tool run inside a guarded run."""
        self._joined(run_id, parent_run_id)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """Leave the guard when a guarded root run finishes."""
        run = self._ended(run_id)
        if run is not None:
            with run.stack:
                self.guard.left(run.thread_id, None)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """Record how a guarded root run failed, then leave the guard."""
        run = self._ended(run_id)
        if run is None:
            return
        try:
            with run.stack:
                self.guard.left(run.thread_id, error, lambda: self._values(run.thread_id, error))
        except Exception as exc:  # giving the thread back failed: the run's error matters more
            logger.warning("releasing thread %s failed: %s", run.thread_id, exc)

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """Forget a finished tool run."""
        self._ended(run_id)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """Forget a failed tool run."""
        self._ended(run_id)

    def _joined(self, run_id: UUID, parent_run_id: UUID | None) -> bool:
        """Record a run whose parent is inside a guarded run; False when it is not."""
        if parent_run_id is None:
            return False
        with self._lock:
            root = self._inside.get(parent_run_id)
            if parent_run_id in self._roots:
                root = parent_run_id
            if root is None:
                return False
            self._inside[run_id] = root
            return True

    def _ended(self, run_id: UUID) -> _GuardedRun | None:
        """Forget a run; for a guarded root, every run inside it too, and return it."""
        with self._lock:
            if self._inside.pop(run_id, None) is not None:
                return None
            run = self._roots.pop(run_id, None)
            if run is not None:
                for inner in [k for k, root in self._inside.items() if root == run_id]:
                    del self._inside[inner]
            return run

    def _saved(self, thread_id: str, checkpoint_id: str | None = None) -> SavedRun:
        if self.checkpoints is None:
            return SavedRun(thread_id)
        with self.checkpoints() as checkpointer:
            return read_saved_run(checkpointer, thread_id, checkpoint_id)

    def _values(self, thread_id: str, error: BaseException) -> DiagnosisState:
        """The state a failed run left, as its last checkpoint holds it (empty if unreadable)."""
        if isinstance(error, KeyboardInterrupt | asyncio.CancelledError | GeneratorExit):
            return cast(DiagnosisState, {})
        try:
            return self._saved(thread_id).values
        except Exception:  # the state cannot be read: record what is known
            return cast(DiagnosisState, {})
