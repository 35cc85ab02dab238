"""The compiled, checkpointer-free graph that ``langgraph.json`` serves.

The LangGraph server supplies the checkpointer (``checkpointer`` below, from
``persistence/checkpointers.py``); this graph records its audit rows and tool invocations in the
same configured database (``SUPERBIZ_DATABASE_URL``: PostgreSQL, or an SQLite file; unset, the
embedded SQLite file the CLI uses). ``database`` opens on first use, not on import, so drawing the
graph needs none. A database that cannot be opened fails the run that needed it with the reason,
and the next run tries again; nothing falls back to memory. The stores are synchronous: the
graph's nodes are sync functions, which the server runs in worker threads, off its event loop.

The graph is compiled by ``graph.compile.compile_graph``, as every program's is: each run holds its
thread's writer lock and leases its diagnosis (``graph/guard.py``), in the same tables the command
line and the HTTP API use, so a LangGraph run and an ``/api/chat`` request on one thread never run
at once. The guard reads a thread's last checkpoint (the diagnosis a resume continues, the state a
failed run left) through a synchronous checkpointer on the same database, opened for each read.

Each diagnosis records the evidence it ran on as the other entry points do
(``apps.resuming.environment_ref``: the sample, and the real backends configured), so a server
sweep resumes an orphan of this graph on the same backends instead of refusing it.
"""

from __future__ import annotations

from apps.langgraph_server.database import database
from apps.resuming import environment_ref
from graph.compile import RunStores, compile_graph
from persistence.audit import SqlAuditStore
from persistence.checkpointers import checkpointer
from persistence.checkpoints import checkpoint_saver
from persistence.ledger import SqlLedger
from persistence.runs import SqlRunLocks

graph = compile_graph(
    RunStores(
        audit=SqlAuditStore(database),
        ledger=SqlLedger(database),
        locks=SqlRunLocks(database, origin="langgraph"),
    ),
    environment=environment_ref(None),
    checkpoints=lambda: checkpoint_saver(database),
    name="superbiz",
)

__all__ = ["checkpointer", "database", "graph"]
