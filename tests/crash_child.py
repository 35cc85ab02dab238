"""Child process for the crash tests: a diagnosis whose second tool call blocks until killed.

Usage: python tests/crash_child.py DATABASE_URL THREAD_ID MARKER_FILE QUESTION [--lang L] [--env F]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from typing_extensions import Unpack

from apps.resuming import environment_ref
from evidence.environment import Environment, default_environment, load_environment
from evidence.sample import SampleBackend
from graph.compile import compile_graph
from graph.runner import run_diagnosis
from persistence.store import open_persistence
from state.context import Context
from tools.backend import LogsOutput, LogsQuery, MetricsOutput, MetricsQuery


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


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("thread")
    parser.add_argument("marker")
    parser.add_argument("question")
    parser.add_argument("--lang", default="zh")
    parser.add_argument("--env", default=None)
    args = parser.parse_args(argv)
    persistence = open_persistence(args.url)
    environment = load_environment(args.env) if args.env else default_environment()
    backend = StallingBackend(environment, Path(args.marker))
    app = compile_graph(persistence, backend, environment=environment_ref(args.env))
    run_diagnosis(
        app,
        thread_id=args.thread,
        context=Context(offline=True, tool_timeout_s=900.0, language=args.lang),
        audit=persistence.audit,
        question=args.question,
    )


if __name__ == "__main__":
    main(sys.argv[1:])
