"""What a thread's last checkpoint says about its run, read through the checkpointer alone.

A resume has to know, before any graph is built for it, whether the thread has work left and
which diagnosis that work continues: the settings and the evidence environment of the graph it
runs on come from that diagnosis's record (``graph/resume.py``). The run guard asks the same
questions when a run starts on a saved thread (``graph/guard.py``). Both read the thread's last
checkpoint with ``BaseCheckpointSaver.get_tuple`` and nothing else.

What is still to run follows from LangGraph's checkpoint format: a node is due when its trigger
channel holds a value newer than the version the node last saw (``channel_versions`` against
``versions_seen``). Each node of the diagnosis graph has one trigger: ``__start__`` for the input,
``branch:to:<node>`` for every node. ``tests/test_saved_run.py`` holds this reading against the
tasks ``get_state`` prepares at every checkpoint of real runs, so a LangGraph release that changes
the format fails there, not in a resume.

A due node counts even when its writes were saved (``pending_writes``) and the checkpoint after
its step was not (a process killed in between, which the asynchronous checkpoint writes make
likely under load): ``get_state`` leaves such a node out of ``next``, but a resume applies its
writes and carries on from there, so the run is not over.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, Checkpoint
from langgraph.constants import START

from graph.builder import NODES
from models.messages import last_human
from nodes.intake import diagnosis_id_for
from state.graph_state import DiagnosisState

TRIGGERS: Mapping[str, str] = {START: START, **{node: f"branch:to:{node}" for node in NODES}}
"""The channel whose update makes each node (and the input step) due."""

STATE_KEYS = DiagnosisState.__required_keys__ | DiagnosisState.__optional_keys__


@dataclass(frozen=True)
class SavedRun:
    """A thread's run as its last checkpoint left it."""

    thread_id: str
    next: tuple[str, ...] = ()
    """The nodes still to run, or whose saved writes a resume still applies (``__start__``:
    only the question was saved); empty when the thread's last run finished, or nothing was
    saved."""
    values: DiagnosisState = field(default_factory=lambda: cast(DiagnosisState, {}))
    """The state as the checkpoint holds it (empty when nothing was saved)."""

    def resumed_diagnosis_id(self) -> str | None:
        """The diagnosis a resume from here continues, or None when there is none.

        Usually the state's ``diagnosis_id``. While intake is still due, the state's id is the
        previous question's: intake runs again and names the diagnosis after the thread and the
        question's message id, which has a record only if intake had started it. While only the
        question was saved (``__start__`` due), the resume starts the diagnosis itself.
        """
        if not self.next or START in self.next:
            return None
        if "intake" in self.next:
            human = last_human(self.values.get("messages", []))
            return diagnosis_id_for(self.thread_id, str(human.id)) if human is not None else None
        value = self.values.get("diagnosis_id")
        return str(value) if value else None


def thread_config(thread_id: str, checkpoint_id: str | None = None) -> RunnableConfig:
    """The config that reads a thread's last checkpoint (or the one named) of the graph."""
    configurable: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def read_saved_run(
    checkpointer: BaseCheckpointSaver[Any], thread_id: str, checkpoint_id: str | None = None
) -> SavedRun:
    """The thread's run as its last checkpoint left it (nothing due when there is none).

    ``checkpoint_id`` reads an earlier checkpoint instead (a run replayed from it).
    """
    found = checkpointer.get_tuple(thread_config(thread_id, checkpoint_id))
    return SavedRun(thread_id) if found is None else saved_run_of(found.checkpoint, thread_id)


def saved_run_of(checkpoint: Checkpoint, thread_id: str) -> SavedRun:
    """The run a checkpoint of the diagnosis graph describes."""
    channels = checkpoint["channel_values"]
    versions: Mapping[str, Any] = checkpoint["channel_versions"]
    seen: Mapping[str, Mapping[str, Any]] = checkpoint["versions_seen"]
    due = tuple(
        node
        for node, trigger in TRIGGERS.items()
        if trigger in channels and _newer(versions.get(trigger), seen.get(node, {}).get(trigger))
    )
    values = {key: value for key, value in channels.items() if key in STATE_KEYS}
    return SavedRun(thread_id, due, cast(DiagnosisState, values))


def _newer(version: Any, seen: Any) -> bool:
    """Whether a trigger's version is one its node has not seen yet."""
    return version is not None and (seen is None or bool(version > seen))
