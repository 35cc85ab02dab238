"""Child process for the crash test: a diagnosis whose second tool call blocks until killed.

Usage: python tests/crash_child.py DATABASE_URL THREAD_ID MARKER_FILE QUESTION
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from typing_extensions import Unpack

from graph.builder import build_graph
from graph.runner import run_diagnosis
from persistence.store import open_persistence
from state.context import Context
from tools.backend import LogsOutput, LogsQuery, MetricsOutput, MetricsQuery
from tools.environment import Environment
from tools.sample import SampleBackend, default_environment


class StallingBackend(SampleBackend):
    """The sample backend, except that its second call announces itself and never returns."""

    def __init__(self, environment: Environment, marker: Path) -> None:
        super().__init__(environment)
        self.calls = 0
        self.marker = marker

    def _stall(self) -> None:
        self.calls += 1
        if self.calls == 2:
            self.marker.write_text("stalled", encoding="utf-8")
            time.sleep(600)

    def query_logs(self, **query: Unpack[LogsQuery]) -> LogsOutput:
        self._stall()
        return super().query_logs(**query)

    def query_metrics(self, **query: Unpack[MetricsQuery]) -> MetricsOutput:
        self._stall()
        return super().query_metrics(**query)


def main(url: str, thread: str, marker: str, question: str) -> None:
    persistence = open_persistence(url)
    backend = StallingBackend(default_environment(), Path(marker))
    app = build_graph(backend=backend, ledger=persistence.ledger, audit=persistence.audit).compile(
        checkpointer=persistence.checkpointer
    )
    with persistence.thread_lock(thread):
        run_diagnosis(
            app,
            thread_id=thread,
            context=Context(offline=True, tool_timeout_s=900.0),
            audit=persistence.audit,
            question=question,
        )


if __name__ == "__main__":
    main(*sys.argv[1:5])
