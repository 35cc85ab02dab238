"""The compiled, checkpointer-free graph that ``langgraph.json`` serves.

The LangGraph server supplies the checkpointer (``checkpointer`` below, from
``graph/checkpointers.py``); this graph records its audit rows and tool invocations in the same
configured database (``SUPERBIZ_DATABASE_URL``: PostgreSQL, or an SQLite file; unset, the
embedded SQLite file the CLI uses). ``database`` opens on first use, not on import, so drawing the
graph needs none. A database that cannot be opened fails the run that needed it with the reason,
and the next run tries again; nothing falls back to memory. The stores are synchronous: the
graph's nodes are sync functions, which the server runs in worker threads, off its event loop.
"""

from __future__ import annotations

import atexit

from graph.builder import build_graph
from graph.checkpointers import checkpointer
from persistence.audit import SqlAuditStore
from persistence.database import Database
from persistence.ledger import SqlLedger

database = Database()
atexit.register(database.close)

graph = build_graph(ledger=SqlLedger(database), audit=SqlAuditStore(database)).compile(
    name="superbiz"
)

__all__ = ["checkpointer", "graph"]
