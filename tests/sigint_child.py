"""Child process for the Ctrl-C test: ``superbiz diagnose`` whose second tool call stalls.

Usage: python tests/sigint_child.py MARKER_FILE ARGS...  (the arguments of ``superbiz``)
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from typing import Any

import apps.cli.main as cli
import evidence.composed
from evidence.sample import SampleBackend


class StallingBackend(SampleBackend):
    """The sample backend, except that its second call announces itself and waits."""

    calls = 0

    def query_logs(self, **query: Any) -> Any:
        StallingBackend.calls += 1
        if StallingBackend.calls == 1:
            Path(sys.argv[1]).write_text("stalled", encoding="utf-8")
            time.sleep(600)
        return super().query_logs(**query)


if __name__ == "__main__":
    # As in a terminal: a child started from a background job inherits SIGINT ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    vars(evidence.composed)["SampleBackend"] = StallingBackend
    sys.exit(cli.main(sys.argv[2:]))
