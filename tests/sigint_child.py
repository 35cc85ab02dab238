"""Child process for the Ctrl-C tests: ``superbiz diagnose`` whose first log query stalls.

Usage: python tests/sigint_child.py MARKER_FILE ARGS...  (the arguments of ``superbiz``)

With ``STALL_IN_INTAKE=1`` it stalls in intake instead, once the diagnosis has started (its
record written), while no checkpoint of the run is saved (every checkpoint write hangs, as on a
slow disk or database).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import apps.cli.main as cli
import evidence.composed
from evidence.sample import SampleBackend
from persistence.audit import SqlAuditStore
from persistence.checkpoints import MaintainedSqliteSaver


class StallingBackend(SampleBackend):
    """The sample backend, except that its second call announces itself and waits."""

    calls = 0

    def query_logs(self, **query: Any) -> Any:
        StallingBackend.calls += 1
        if StallingBackend.calls == 1:
            Path(sys.argv[1]).write_text("stalled", encoding="utf-8")
            time.sleep(600)
        return super().query_logs(**query)


def stalled_put(self: Any, *args: Any, **kwargs: Any) -> Any:
    """A checkpoint write that never finishes."""
    time.sleep(600)


def stalled_abandon(self: SqlAuditStore, thread_id: str, *, keep: str | None = None) -> list[str]:
    """Intake's last step before it returns: announce, then wait."""
    Path(sys.argv[1]).write_text("stalled", encoding="utf-8")
    time.sleep(600)
    return []


if __name__ == "__main__":
    # As in a terminal: a child started from a background job inherits SIGINT ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    vars(evidence.composed)["SampleBackend"] = StallingBackend
    if os.environ.get("STALL_IN_INTAKE") == "1":
        SqlAuditStore.abandon_running = stalled_abandon  # type: ignore[method-assign]
        MaintainedSqliteSaver.put = stalled_put  # type: ignore[method-assign]
    sys.exit(cli.main(sys.argv[2:]))
