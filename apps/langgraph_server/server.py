"""The compiled, checkpointer-free graph that ``langgraph.json`` serves.

The LangGraph server supplies the checkpointer (``checkpointer`` below, from
``persistence/checkpointers.py``); this graph records its audit rows and tool invocations in the
same configured database (``SUPERBIZ_DATABASE_URL``: PostgreSQL, or an SQLite file; unset, the
embedded SQLite file the CLI uses). ``database`` opens on first use, not on import, so drawing the
graph needs none. A database that cannot be opened fails the run that needed it with the reason,
and the next run tries again; nothing falls back to memory. The stores are synchronous: the
graph's nodes are sync functions, which the server runs in worker threads, off its event loop.

Each run holds its thread's writer lock and leases its diagnosis (``graph/guard.py``), in the same
tables the command line and the HTTP API use, so a LangGraph run and an ``/api/chat`` request on
one thread never run at once.
"""

from __future__ import annotations

from apps.langgraph_server.database import database
from graph.builder import build_graph
from persistence.audit import SqlAuditStore
from persistence.checkpointers import checkpointer
from persistence.ledger import SqlLedger
from persistence.runs import SqlRunLocks

graph = build_graph(
    ledger=SqlLedger(database),
    audit=SqlAuditStore(database),
    locks=SqlRunLocks(database, origin="langgraph"),
    environment={"kind": "sample"},
).compile(name="superbiz")

__all__ = ["checkpointer", "database", "graph"]
