"""Intake: start a new diagnosis for the last human message of the thread."""

from __future__ import annotations

import time
import uuid
from typing import Any

from langgraph.runtime import Runtime
from langgraph.types import Overwrite

from models.budget import GetModel, model_label
from models.messages import last_human, message_text
from nodes.common import Node, context_of, emit, thread_id
from persistence.audit import AuditStore
from persistence.runs import RunLocks
from state.context import ROLES, Context
from state.graph_state import DiagnosisState
from state.records import ModelUsage, RunInfo
from state.run_settings import run_settings

_NAMESPACE = uuid.UUID("6f1c7e0a-52c4-4f0e-9a55-3f4f3c1b9d21")


def diagnosis_id_for(thread: str, message_id: str) -> str:
    """Deterministic diagnosis id, so a re-executed intake yields the same id."""
    return "diag-" + uuid.uuid5(_NAMESPACE, f"{thread}:{message_id}").hex[:20]


def make_intake(
    get_model: GetModel,
    audit: AuditStore,
    locks: RunLocks,
    environment: dict[str, Any] | None = None,
) -> Node:
    """Build the intake node: question, diagnosis id, run settings, lease, reset of fields."""

    def intake(state: DiagnosisState, *, runtime: Runtime[Context]) -> dict[str, object]:
        ctx = context_of(runtime)
        human = last_human(state.get("messages", []))
        question = message_text(human).strip()
        if human is None or not question:
            raise ValueError(
                "no question: send the question as a human message, e.g. "
                '{"messages": [{"role": "user", "content": "is order-service failing?"}]}'
            )
        thread = thread_id()
        diagnosis_id = diagnosis_id_for(thread, str(human.id))
        models = {
            role: "offline-rules" if ctx.offline else model_label(get_model(role, ctx))
            for role in ROLES
            if role != "composer" or ctx.composer_mode == "model"
        }
        audit.start_diagnosis(
            diagnosis_id,
            thread_id=thread,
            question=question,
            settings=run_settings(ctx, environment),
        )
        if thread != "-":
            locks.lease(diagnosis_id, thread)
        # Runs on one thread are serial (writer lock, or the server's per-thread queue), so an
        # earlier diagnosis of this thread still marked running belongs to a run that died.
        if thread != "-":  # without a checkpointer there is no thread to speak of
            audit.abandon_running(thread, keep=diagnosis_id)
        emit("intake", round=1, diagnosis_id=diagnosis_id, offline=ctx.offline)
        return {
            "diagnosis_id": diagnosis_id,
            "question": question,
            "run_info": RunInfo(offline=ctx.offline, language=ctx.language, models=models),
            "round": 1,
            "started_at": time.time(),
            "usage": Overwrite(ModelUsage(calls=0, input_tokens=0, output_tokens=0)),
            "model_calls": Overwrite([]),
            "known_services": [],
            "budget_note": None,
            "plan": "",
            "tool_calls_used": 0,
            "verdict": "",
            "groundedness_score": 0.0,
            "root_cause": None,
            "suspects": [],
            "retry_context": None,
            "answer": "",
            "rounds": Overwrite([]),
            "route": Overwrite(["intake"]),
        }

    return intake
