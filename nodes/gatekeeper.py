"""Gatekeeper node: the deterministic evidence rules and the ``rule_evaluation`` channel."""

from __future__ import annotations

from langgraph.runtime import Runtime

from nodes.common import Node, emit
from persistence.audit import AuditStore
from persistence.ledger import InvocationLedger
from state.context import Context
from state.graph_state import DiagnosisState
from verification.catalog import Settings
from verification.gatekeeper import gatekeep
from verification.rule_evaluation import evaluate_rules


def make_gatekeeper(ledger: InvocationLedger, audit: AuditStore, settings: Settings) -> Node:
    """Build the gatekeeper node on the rule settings of a catalog."""

    def gatekeeper(state: DiagnosisState, *, runtime: Runtime[Context]) -> DiagnosisState:
        emit("gatekeeper", round=state.get("round", 1))
        invocations = ledger.list(state["diagnosis_id"])
        answer = state["executor_answer"]
        result = gatekeep(answer, invocations, settings, question=state.get("question", ""))
        evaluation = evaluate_rules(invocations, answer, result)
        audit.update_channel(state["diagnosis_id"], "rule_evaluation", evaluation)
        return {"gatekeeper_result": result, "rule_evaluation": evaluation, "route": ["gatekeeper"]}

    return gatekeeper
