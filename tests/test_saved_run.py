"""A thread's last checkpoint, read through the checkpointer alone (``graph/saved_run.py``).

The reading is held against LangGraph's own ``get_state`` at every checkpoint of real runs, as a
process killed right after that checkpoint would leave the thread: with nothing saved after it,
and with the writes of the node that ran after it saved but not the checkpoint that followed. A
LangGraph release that changes its checkpoint format fails here.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.constants import START

from graph.builder import NODES
from graph.compile import RunStores, compile_graph
from graph.guard import RESUMED_NOTE
from graph.resume import plan_resume
from graph.runner import NothingToResume, run_diagnosis
from graph.saved_run import TRIGGERS, SavedRun, read_saved_run
from nodes.intake import diagnosis_id_for
from state.context import Context
from state.graph_state import InputState

QUESTIONS = ("order-service 为什么报 500？", "payment-service 慢吗？")
OFFLINE = Context(offline=True)
THREAD = "t-saved"


def _history(checkpointer: BaseCheckpointSaver[str]) -> tuple[RunStores, list[CheckpointTuple]]:
    """Two questions diagnosed to the end on one thread: every checkpoint, newest first."""
    stores = RunStores(checkpointer)
    app = compile_graph(stores)
    config: RunnableConfig = {"configurable": {"thread_id": THREAD}}
    for question in QUESTIONS:
        app.invoke(InputState(messages=[HumanMessage(question)]), config, context=OFFLINE)
    found = [checkpointer.get_tuple(s.config) for s in app.get_state_history(config)]
    return stores, [t for t in found if t is not None]


def _left_at(found: CheckpointTuple, *, with_writes: bool) -> InMemorySaver:
    """A thread (``THREAD``) whose last checkpoint is ``found``, as a killed process leaves it.

    ``with_writes``: the writes of the node that ran after it were saved as well.
    """
    saver = InMemorySaver()
    config = saver.put(
        {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}},
        found.checkpoint,
        found.metadata,
        found.checkpoint["channel_versions"],
    )
    if with_writes:
        by_task: dict[str, list[tuple[str, Any]]] = {}
        for task_id, channel, value in found.pending_writes or ():
            by_task.setdefault(task_id, []).append((channel, value))
        for task_id, writes in by_task.items():
            saver.put_writes(config, writes, task_id)
    return saver


def test_saved_run_triggers_are_the_compiled_graph_s() -> None:
    app = compile_graph(RunStores(InMemorySaver()))

    assert {name: list(node.triggers) for name, node in app.nodes.items()} == {
        name: [trigger] for name, trigger in TRIGGERS.items()
    }
    assert set(TRIGGERS) == {START, *NODES}


def test_saved_run_matches_get_state_at_every_checkpoint(
    checkpointer: BaseCheckpointSaver[str],
) -> None:
    stores, history = _history(checkpointer)
    reader = compile_graph(RunStores())  # reads any checkpointer given with copy()
    config: RunnableConfig = {"configurable": {"thread_id": THREAD}}
    compared = 0

    for found in history:
        for with_writes in (False, True):
            saver = _left_at(found, with_writes=with_writes)
            snapshot = reader.copy(update={"checkpointer": saver}).get_state(config)
            saved = read_saved_run(saver, THREAD)

            assert saved.next == tuple(task.name for task in snapshot.tasks)
            if with_writes and found.pending_writes:
                # get_state leaves a finished node out of next; its writes are still to apply
                assert snapshot.next == ()
            else:
                assert saved.next == snapshot.next
                shown = dict(snapshot.values)
                assert dict(saved.values) == {key: shown[key] for key in saved.values}
                # what get_state shows beyond: the empty start of channels never written
                assert all(shown[key] in ([], {}) for key in shown.keys() - saved.values.keys())
            compared += 1

    assert compared == 2 * len(history) >= 2 * 2 * (len(NODES) + 2)


def test_saved_run_names_the_diagnosis_a_resume_continues(
    checkpointer: BaseCheckpointSaver[str],
) -> None:
    stores, history = _history(checkpointer)
    first, second = (r["id"] for r in stores.audit.list(THREAD))
    expected_by_due: dict[tuple[str, ...], set[str | None]] = {}

    for found in history:
        saved = read_saved_run(_left_at(found, with_writes=False), THREAD)
        if saved.next:
            expected_by_due.setdefault(saved.next, set()).add(saved.resumed_diagnosis_id())

    assert expected_by_due[(START,)] == {None}  # only the question was saved
    assert expected_by_due[("intake",)] == {first, second}  # named after the pending question
    assert expected_by_due[("audit",)] == {first, second}
    human = history[0].checkpoint["channel_values"]["messages"][-2]
    assert diagnosis_id_for(THREAD, str(human.id)) == second


def test_saved_run_of_a_thread_never_saved_has_nothing_due() -> None:
    saved = read_saved_run(InMemorySaver(), "t-none")

    assert saved == SavedRun("t-none")
    assert saved.resumed_diagnosis_id() is None


def test_saved_run_resume_finishes_a_run_killed_after_a_node_s_writes_were_saved() -> None:
    """The asynchronous checkpoint write after a node can be lost with the process while the
    node's writes were saved: the run is not over, a resume applies them and carries on."""
    saver = InMemorySaver()
    stores = RunStores(saver)
    app = compile_graph(stores)
    config: RunnableConfig = {"configurable": {"thread_id": THREAD}}
    question = InputState(messages=[HumanMessage(QUESTIONS[0])])
    for _ in app.stream(question, config, context=OFFLINE, interrupt_after=["planner"]):
        pass
    for _ in app.stream(None, config, context=OFFLINE, interrupt_after=["executor"]):
        pass
    [before_executor] = [
        t
        for s in app.get_state_history(config)
        if s.next == ("executor",) and (t := saver.get_tuple(s.config)) is not None
    ]
    killed = RunStores(
        _left_at(before_executor, with_writes=True), stores.audit, stores.ledger, stores.locks
    )

    plan = plan_resume(killed, THREAD)
    values = run_diagnosis(
        compile_graph(killed),
        thread_id=THREAD,
        context=plan.context,
        audit=killed.audit,
        resume=True,
    )

    assert values["verdict"] == "PASS"
    [record] = stores.audit.list(THREAD)
    assert (record["id"], record["status"], record["note"]) == (
        plan.diagnosis_id,
        "done",
        RESUMED_NOTE,
    )
    with pytest.raises(NothingToResume, match="its last diagnosis finished"):
        plan_resume(killed, THREAD)
