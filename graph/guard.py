"""The graph guards its own runs: one writer per thread, and no diagnosis left ``running``.

``GuardedGraph`` is the compiled diagnosis graph. Every run of it, whoever starts it (the command
line, the HTTP API, the LangGraph server, the sweeper), goes through ``stream`` or ``astream``
(``invoke``, ``ainvoke`` and the event streams are built on them), and there the graph:

- takes the thread's writer lock before its first node runs, or refuses the run (``ThreadBusy``);
- on a resume, takes the lease of the diagnosis it resumes and notes the resume on its record
  (a new question's diagnosis is leased by the intake node when it starts it);
- when the run leaves, however it leaves, records how on the diagnosis (``failed`` with the
  reason, the partial audit and a degraded answer for an error, ``graph/failures.py``; ``failed``
  for a cancellation; a note with the resume command for Ctrl-C, which leaves it resumable),
  gives back the leases and releases the lock.

A process that is killed cannot do the last step: its lock dies with it (PostgreSQL connection,
SQLite row of a dead pid) and its lease expires, which is what the sweeper looks for.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import ExitStack
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import StateSnapshot

from graph.failures import record_failure
from models.messages import last_human
from nodes.intake import diagnosis_id_for
from persistence.audit import AuditStore
from persistence.runs import RunLocks
from state.context import Context
from state.graph_state import DiagnosisState, InputState, OutputState
from state.json_shape import obj
from state.records import DiagnosisStatus

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
        partial audit and a degraded answer), from the run's state ``values()`` when given.
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
                record_failure(state, diagnosis_id, self.audit, context, exc)
        except Exception:  # bookkeeping must never hide the original error
            return

    def note(self, diagnosis_id: str, status: DiagnosisStatus | None, note: str) -> None:
        """Note how a running diagnosis stopped (a finished one is left as it is)."""
        record = self.audit.get(diagnosis_id)
        if record is not None and record["status"] == "running":
            self.audit.mark(diagnosis_id, status=status, note=note)


def resumed_diagnosis_id(snapshot: StateSnapshot) -> str | None:
    """The diagnosis a resume from this state continues, or None when there is none.

    Usually the state's ``diagnosis_id``. While intake is still pending, the state's id is the
    previous question's: when intake has already run (its writes were saved, the checkpoint
    after it was not), its writes name the diagnosis; when it has not run, the resume starts the
    diagnosis itself and there is none yet.
    """
    if not snapshot.next or "__start__" in snapshot.next:
        return None  # the question itself is pending: intake starts its diagnosis
    for task in snapshot.tasks:
        if task.name == "intake":
            written = obj(task.result)
            found = written.get("diagnosis_id")
            if found:
                return str(found)
            # Intake's writes were lost with the process, or it never ran: it runs again with
            # the same (deterministic) id, which has a record only if it had started.
            human = last_human((snapshot.values or {}).get("messages", []))
            thread = (snapshot.config.get("configurable") or {}).get("thread_id")
            if human is None or thread is None:
                return None
            return diagnosis_id_for(str(thread), str(human.id))
    value = (snapshot.values or {}).get("diagnosis_id")
    return str(value) if value else None


def _thread_of(config: RunnableConfig | None) -> str | None:
    value = ((config or {}).get("configurable") or {}).get("thread_id")
    return str(value) if value is not None else None


def _is_resume(payload: Any) -> bool:
    return payload is None or not isinstance(payload, dict)


class GuardedGraph(CompiledStateGraph[DiagnosisState, Context, InputState, OutputState]):
    """The compiled diagnosis graph, whose runs hold their thread and lease their diagnosis.

    A run without a ``thread_id`` (no checkpointer) has no thread to guard and runs as is.
    """

    def __init__(self, *, run_guard: RunGuard | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.run_guard = run_guard

    def stream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Iterator[Any]:
        """``CompiledStateGraph.stream``, inside the run guard."""
        guard, thread = self.run_guard, _thread_of(config)
        if guard is None or thread is None:
            yield from super().stream(input, config, **kwargs)
            return
        stack = guard.enter(thread)
        with stack:
            error: BaseException | None = None
            try:
                if _is_resume(input):
                    diagnosis_id = resumed_diagnosis_id(self.get_state(config or {}))
                    if diagnosis_id:
                        guard.resumed(thread, diagnosis_id)
                yield from super().stream(input, config, **kwargs)
            except BaseException as exc:
                error = exc
                raise
            finally:
                guard.left(
                    thread,
                    error,
                    lambda: cast(DiagnosisState, self.get_state(config or {}).values),
                    _context_of(kwargs),
                )

    async def astream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        """``CompiledStateGraph.astream``, inside the run guard (its blocking parts in threads)."""
        guard, thread = self.run_guard, _thread_of(config)
        if guard is None or thread is None:
            async for chunk in super().astream(input, config, **kwargs):
                yield chunk
            return
        stack = await asyncio.to_thread(guard.enter, thread)
        error: BaseException | None = None
        try:
            if _is_resume(input):
                diagnosis_id = resumed_diagnosis_id(await self.aget_state(config or {}))
                if diagnosis_id:
                    await asyncio.to_thread(guard.resumed, thread, diagnosis_id)
            async for chunk in super().astream(input, config, **kwargs):
                yield chunk
        except BaseException as exc:
            error = exc
            raise
        finally:
            values: DiagnosisState = cast(DiagnosisState, {})
            if error is not None and not isinstance(error, asyncio.CancelledError):
                try:
                    values = cast(DiagnosisState, (await self.aget_state(config or {})).values)
                except Exception:  # the state cannot be read: record what is known
                    pass
            context = _context_of(kwargs)
            await asyncio.shield(
                asyncio.to_thread(_leave, guard, thread, error, stack, values, context)
            )


def _context_of(kwargs: dict[str, Any]) -> Context | None:
    context = kwargs.get("context")
    return context if isinstance(context, Context) else None


def _leave(
    guard: RunGuard,
    thread: str,
    error: BaseException | None,
    stack: ExitStack,
    values: DiagnosisState,
    context: Context | None,
) -> None:
    with stack:
        guard.left(thread, error, lambda: values, context)
