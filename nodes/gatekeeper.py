"""Gatekeeper node: the deterministic rule checks and the ``rule_evaluation`` channel."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from nodes.common import Node, emit
from persistence.audit import AuditStore
from persistence.ledger import InvocationLedger
from state.context import Context
from state.graph_state import DiagnosisState
from verification.gatekeeper import run_gatekeeper
from verification.rule_evaluation import evaluate_rules


def make_gatekeeper(
    ledger: InvocationLedger,
    audit: AuditStore,
    catalog: dict[str, Any] | None = None,
) -> Node:
    """Build the gatekeeper node: the rule checks and the ``rule_evaluation`` channel."""

    def gatekeeper(state: DiagnosisState, *, runtime: Runtime[Context]) -> dict[str, Any]:
        emit("gatekeeper", round=state.get("round", 1))
        invocations = ledger.list(state["diagnosis_id"])
        structured = state.get("structured_output")
        result = run_gatekeeper(
            state.get("parse_status") or {"status": "missing"}, structured, invocations, catalog
        )
        evaluation = evaluate_rules(invocations, structured, result)
        audit.update_channel(state["diagnosis_id"], "rule_evaluation", evaluation)
        return {"gatekeeper_result": result, "rule_evaluation": evaluation, "route": ["gatekeeper"]}

    return gatekeeper
