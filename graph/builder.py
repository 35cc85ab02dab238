"""Graph wiring only: ``build_graph(...)`` returns the uncompiled diagnosis graph."""

from __future__ import annotations

from typing import Any

from langgraph.graph import END, START, StateGraph

from evidence.composed import configured_backend
from graph.routing import after_executor, after_verifier
from models.budget import GetModel
from models.factory import make_model_factory
from nodes.audit import make_audit
from nodes.composer import make_composer
from nodes.evidence import make_evidence
from nodes.executor import make_executor
from nodes.gatekeeper import make_gatekeeper
from nodes.intake import make_intake
from nodes.planner import make_planner
from nodes.retry import make_retry
from nodes.tool_calls import make_tools
from nodes.verifier import make_verifier
from persistence.audit import AuditStore, InMemoryAuditStore
from persistence.ledger import InMemoryLedger, InvocationLedger
from persistence.runs import InMemoryRunLocks, RunLocks
from state.context import Context
from state.graph_state import DiagnosisState, InputState, OutputState
from tools.backend import EvidenceBackend
from tools.registry import offered
from tools.runner import ToolRunner
from verification.catalog import Catalog, settings_for

NODES = (
    "intake",
    "planner",
    "executor",
    "tools",
    "evidence",
    "gatekeeper",
    "verifier",
    "retry",
    "composer",
    "audit",
)


INTERNAL_NODES = ("planner", "executor", "tools")
"""Nodes whose state updates carry the executor's private conversation (plan, tool calls, tool
results, its raw JSON answer). They are hidden from the ``messages`` stream, so a chat client
sees only the question and the composed answer (``graph/compile.py`` tags them)."""


Builder = StateGraph[DiagnosisState, Context, InputState, OutputState]
"""The uncompiled diagnosis graph."""


def build_graph(
    *,
    get_model: GetModel | None = None,
    backend: EvidenceBackend | None = None,
    ledger: InvocationLedger | None = None,
    audit: AuditStore | None = None,
    gatekeeper_catalog: Catalog | None = None,
    locks: RunLocks | None = None,
    environment: dict[str, Any] | None = None,
) -> Builder:
    """Build the diagnosis graph (uncompiled; ``graph.compile.compile_graph`` compiles it).

    Args:
        get_model: ``get_model(role, context)``; defaults to the environment-configured
            OpenAI-compatible models, or the offline rule-based models.
        backend: where evidence comes from; defaults to the configured backends
            (``evidence.composed.configured_backend``: the bundled sample when none is set).
        ledger: where tool invocations are recorded; defaults to an in-memory ledger.
        audit: where diagnoses are recorded; defaults to an in-memory audit store.
        gatekeeper_catalog: a rule catalog; defaults to the bundled one.
        locks: where intake leases the diagnosis it starts; defaults to in-process locks
            (``persistence.runs.SqlRunLocks`` gives the database's). The run guard that
            ``compile_graph`` adds takes the thread's lock from the same locks.
        environment: where the evidence comes from, as recorded in each diagnosis's run
            settings so a resume uses the same (e.g. ``{"kind": "file", "path": ...}``).

    Raises:
        CatalogError: when ``gatekeeper_catalog`` is not a valid rule catalog.
        ConfigError: when no backend is given and the backend configuration cannot be used.
    """
    get_model = get_model or make_model_factory()
    backend = backend or configured_backend()
    ledger = ledger or InMemoryLedger()
    audit = audit or InMemoryAuditStore()
    locks = locks or InMemoryRunLocks()
    runner = ToolRunner(backend, ledger)
    rules = settings_for(gatekeeper_catalog)

    builder = Builder(
        DiagnosisState, context_schema=Context, input_schema=InputState, output_schema=OutputState
    )
    builder.add_node("intake", make_intake(get_model, audit, locks, environment))
    builder.add_node("planner", make_planner(get_model, backend.services, lambda: offered(backend)))
    builder.add_node("executor", make_executor(get_model, ledger, lambda: offered(backend)))
    builder.add_node("tools", make_tools(runner))
    builder.add_node("evidence", make_evidence(ledger, rules.schema))
    builder.add_node("gatekeeper", make_gatekeeper(ledger, audit, rules))
    builder.add_node("verifier", make_verifier(get_model, backend.services))
    builder.add_node("retry", make_retry())
    builder.add_node("composer", make_composer(get_model))
    builder.add_node("audit", make_audit(audit, rules.catalog))

    builder.add_edge(START, "intake")
    builder.add_edge("intake", "planner")
    builder.add_edge("planner", "executor")
    builder.add_conditional_edges("executor", after_executor)
    builder.add_edge("tools", "executor")
    builder.add_edge("evidence", "gatekeeper")
    builder.add_edge("gatekeeper", "verifier")
    builder.add_conditional_edges("verifier", after_verifier)
    builder.add_edge("retry", "planner")
    builder.add_edge("composer", "audit")
    builder.add_edge("audit", END)
    return builder
