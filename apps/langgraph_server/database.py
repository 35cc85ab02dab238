"""The one database handle of a LangGraph server process, shared by what ``langgraph.json`` loads.

The server loads the graph module and the auth module by file path, each as a module of its own;
both import this module by its name, so they share one ``Database`` (one pool). It opens on first
use, never on import, from ``SUPERBIZ_DATABASE_URL`` (PostgreSQL or an SQLite file; unset, the
embedded SQLite file the command line uses).
"""

from __future__ import annotations

import atexit

from persistence.checkpoints import setup_checkpoints
from persistence.database import Database

database = Database()
database.add_setup(setup_checkpoints)
atexit.register(database.close)
