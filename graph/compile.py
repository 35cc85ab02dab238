"""The one place the diagnosis graph is compiled, for every program that runs it.

``compile_graph(stores, backend, ...)`` builds the graph (``graph/builder.py``) on the stores a
program keeps its runs in (a ``persistence.store.Persistence`` on the configured database, or
``RunStores``: in memory, or the LangGraph server's tables without a checkpointer) and compiles
it: the command line, the HTTP API, the LangGraph server entry, the evaluation and the sweeper's
resumes all run a graph made here.

The compiled graph is LangGraph's own ``CompiledStateGraph``, with two additions made through its
public surface: the internal nodes carry ``TAG_HIDDEN`` (chat streams show only the question and
the answer), and every run carries the run guard (``graph/guard.py``) as a callback handler bound
with ``with_config``, so the lock, the lease and the record of how a run ended hold whoever runs
the graph and however. ``with_config`` and ``copy`` (what the LangGraph server calls to give the
graph its own checkpointer) keep both.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Protocol

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.constants import TAG_HIDDEN

from graph.builder import INTERNAL_NODES, build_graph
from graph.guard import OpenCheckpointer, RunGuard, RunGuardHandler
from graph.runner import Graph
from models.budget import GetModel
from persistence.audit import AuditStore, InMemoryAuditStore
from persistence.ledger import InMemoryLedger, InvocationLedger
from persistence.runs import InMemoryRunLocks, RunLocks
from tools.backend import EvidenceBackend
from verification.catalog import Catalog


class Stores(Protocol):
    """Where a graph's runs keep what they write (``persistence.store.Persistence`` is one)."""

    @property
    def checkpointer(self) -> BaseCheckpointSaver[Any] | None:
        """The thread checkpoints; None when whoever runs the graph supplies its own."""
        ...

    @property
    def audit(self) -> AuditStore:
        """The diagnosis records."""
        ...

    @property
    def ledger(self) -> InvocationLedger:
        """The tool invocations."""
        ...

    @property
    def locks(self) -> RunLocks:
        """The thread locks and diagnosis leases each run takes."""
        ...


@dataclass(frozen=True)
class RunStores:
    """Stores given one by one; each defaults to one that lives in this process's memory."""

    checkpointer: BaseCheckpointSaver[Any] | None = None
    audit: AuditStore = field(default_factory=InMemoryAuditStore)
    ledger: InvocationLedger = field(default_factory=InMemoryLedger)
    locks: RunLocks = field(default_factory=InMemoryRunLocks)


def compile_graph(
    stores: Stores,
    backend: EvidenceBackend | None = None,
    *,
    get_model: GetModel | None = None,
    catalog: Catalog | None = None,
    environment: dict[str, Any] | None = None,
    checkpoints: OpenCheckpointer | None = None,
    name: str | None = None,
) -> Graph:
    """The compiled diagnosis graph on ``stores``, its runs guarded.

    Args:
        stores: The checkpointer, audit store, ledger and run locks.
        backend: Where evidence comes from; defaults to the configured backends (the bundled
            sample when none is set).
        get_model: ``get_model(role, context)``; defaults to the environment-configured models,
            or the offline rule-based ones.
        catalog: A rule catalog; defaults to the bundled one.
        environment: Where the evidence comes from, as recorded in each diagnosis's run settings.
        checkpoints: Opens the checkpointer the run guard reads a thread's last checkpoint
            from; defaults to ``stores.checkpointer``. Given when the graph is compiled without
            one because its runner supplies its own (the LangGraph server): a checkpointer on the
            same database.
        name: The graph's name (the LangGraph server serves it as ``superbiz``).

    Raises:
        CatalogError: when ``catalog`` is not a valid rule catalog.
        ConfigError: when no backend is given and the backend configuration cannot be used.
    """
    compiled = build_graph(
        get_model=get_model,
        backend=backend,
        ledger=stores.ledger,
        audit=stores.audit,
        gatekeeper_catalog=catalog,
        locks=stores.locks,
        environment=environment,
    ).compile(checkpointer=stores.checkpointer, name=name)
    return guarded(compiled, stores, checkpoints)


def guarded(compiled: Graph, stores: Stores, checkpoints: OpenCheckpointer | None = None) -> Graph:
    """A compiled diagnosis graph with its internal nodes hidden and its runs guarded.

    What ``compile_graph`` does after compiling; a benchmark that swaps the nodes of the built
    graph before compiling it finishes its graph the same way.
    """
    for node in INTERNAL_NODES:
        spec = compiled.nodes[node]
        spec.tags = [*(spec.tags or []), TAG_HIDDEN]
    if checkpoints is None and stores.checkpointer is not None:
        checkpoints = _opened(stores.checkpointer)
    guard = RunGuardHandler(RunGuard(stores.locks, stores.audit), checkpoints)
    return compiled.with_config(callbacks=[guard])


def _opened(checkpointer: BaseCheckpointSaver[Any]) -> OpenCheckpointer:
    return lambda: nullcontext(checkpointer)
