"""A thread's last checkpoint, read through the checkpointer alone (``graph/saved_run.py``).

The reading is held against LangGraph's own ``get_state`` at every checkpoint of real runs, as a
process killed right after that checkpoint would leave the thread: with nothing saved after it,
and with the writes of the node that ran after it saved but not the checkpoint that followed. A
LangGraph release that changes its checkpoint format fails here.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.constants import START

from graph.builder import NODES
from graph.compile import RunStores, compile_graph
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

            assert saved.next == snapshot.next
            if not (with_writes and found.pending_writes):  # get_state applied them
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
