"""End to end: ``superbiz diagnose --offline`` answers from real log lines with PASS.

Three log sources, each with the prometheus-operator runbook corpus as the runbook library:
the machine's own PostgreSQL server log (after provoking a FATAL line in it), the Loki stand-in
(``tests/loki_kit.py``, not Loki: a local server implementing Loki's documented answers) and a
real osmem-server (``tests/opensearch_kit.py``).
"""

from __future__ import annotations

import glob
import io
import json
import re
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from apps.cli.main import main
from persistence.store import open_persistence
from state.records import Invocation
from tests.corpora import runbook_corpus
from tests.loki_kit import FakeLoki, Stream, serve_loki
from tests.opensearch_kit import NOW
from tests.postgres_log_kit import (
    log_sizes,
    postgres_log_glob,
    provoke_postgres_fatal,
    wait_for_line,
)
from tools import query_logs

QUESTION = "postgres 最近有什么 FATAL 错误？"


def _ago(minutes: float) -> datetime:
    return NOW - timedelta(minutes=minutes)


def _diagnose(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[dict[str, Any], list[Invocation], list[dict[str, Any]]]:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SUPERBIZ_RUNBOOKS", str(runbook_corpus()))
    db = f"sqlite:///{tmp_path / 'cli.sqlite'}"
    out = io.StringIO()
    monkeypatch.setattr("sys.stdout", out)
    assert main(["diagnose", "--offline", "--json", "--db", db, QUESTION]) == 0
    result: dict[str, Any] = json.loads(out.getvalue())
    persistence = open_persistence(db)
    try:
        calls = persistence.ledger.list(str(result["diagnosis_id"]))
        record = persistence.audit.get(str(result["diagnosis_id"]))
    finally:
        persistence.close()
    assert record is not None
    evaluation: Any = (record["self_evaluation"] or {})["verifier_evaluation"]
    claims: list[dict[str, Any]] = evaluation["executor_structured_output"]["claims"]
    return result, calls, claims


def _check_answer(
    result: dict[str, Any], calls: list[Invocation], claims: list[dict[str, Any]]
) -> Invocation:
    """PASS, from the query_logs call for postgres FATAL lines; runbooks only as next steps.

    The question asks which FATAL lines were logged (a listing, not a why): the answer opens
    with them, whatever else the log holds.
    """
    assert result["verdict"] == "PASS", result["answer"]
    logs = next(c for c in calls if c["tool_name"] == "query_logs")
    assert logs["arguments"] == {"service": "postgres", "level": "FATAL"}
    assert logs["status"] == "ok", logs["error"]
    knowledge = next(c for c in calls if c["tool_name"] == "lookup_knowledge")
    assert knowledge["status"] == "ok", knowledge["error"]
    bindings = [b for c in claims for b in c["evidence_bindings"]]
    assert bindings and {b["tool_name"] for b in bindings} == {"query_logs"}
    answer = str(result["answer"])
    assert "FATAL" in answer
    first = next(line for line in answer.splitlines() if line.startswith("- "))
    assert "postgres" in first and "FATAL" in first, answer
    by_id = {c["invocation_id"]: c for c in calls}
    for binding in bindings:
        source = by_id[binding["source_invocation_id"]]
        texts = {r["raw_path"]: r["text"] for r in source["retrieval_details"]["evidence_refs"]}
        assert binding["evidence_excerpt"] in texts[binding["raw_path"]]
    return logs


LOG_LINE_REF = re.compile(r"^logs\[\d+\]$|\.evidence\[\d+\]$")
"""The refs whose text is a log line: a query's entries and the lines an analysis signal cites."""


@pytest.mark.postgres
def test_diagnose_answers_postgres_fatal_errors_from_its_server_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The live server log, which other processes write to as well: before the diagnosis, the
    provoked line (named uniquely) is waited for; whatever else is in the log, the answer lists
    the FATAL lines found."""
    pattern = postgres_log_glob()
    before = log_sizes(pattern)
    name = provoke_postgres_fatal()
    provoked = wait_for_line(pattern, name, since=before)
    assert f'FATAL:  database "{name}" does not exist' in provoked
    result, calls, claims = _diagnose(
        {"SUPERBIZ_LOG_FILES": f"postgres={pattern}"}, tmp_path, monkeypatch
    )

    logs = _check_answer(result, calls, claims)
    messages = [e["message"] for e in query_logs.result(logs["output"])["logs"]]
    assert f'database "{name}" does not exist' in messages
    raw = "".join(Path(f).read_text(errors="replace") for f in glob.glob(pattern))
    flat = " ".join(raw.split())  # refs show a line's whitespace collapsed
    lines = [
        binding
        for claim in claims
        for binding in claim["evidence_bindings"]
        if LOG_LINE_REF.search(binding["raw_path"])
    ]
    assert lines  # the answer quotes the server's log
    for binding in lines:
        # Real lines of the server's log (an entry's DETAIL / STATEMENT continuation lines are
        # joined to it with " | ").
        for part in binding["evidence_excerpt"].split(" | "):
            assert " ".join(part.split()) in flat


@pytest.fixture
def postgres_in_loki() -> Iterator[str]:
    fake = FakeLoki(
        streams=[
            Stream(
                {"service": "postgres", "level": "FATAL", "instance": "db-1"},
                [
                    (_ago(4), 'database "ghost" does not exist'),
                    (_ago(2), 'password authentication failed for user "shop"'),
                ],
            ),
            Stream({"service": "postgres", "level": "LOG"}, [(_ago(3), "checkpoint starting")]),
        ]
    )
    yield from serve_loki(fake)


@pytest.mark.parametrize(
    ("server", "variable", "reported"),
    [
        pytest.param(
            "postgres_in_loki",
            "SUPERBIZ_LOKI_URL",
            'password authentication failed for user "shop"',
            id="loki",
        ),
        pytest.param(
            "opensearch_url",
            "SUPERBIZ_OPENSEARCH_URL",
            'database "ghost" does not exist',
            id="opensearch",
        ),
    ],
)
def test_diagnose_answers_postgres_fatal_errors_from(
    server: str,
    variable: str,
    reported: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A log server (the fixture named ``server``) holds two postgres FATAL lines."""
    url: str = request.getfixturevalue(server)
    result, calls, claims = _diagnose({variable: url}, tmp_path, monkeypatch)
    logs = _check_answer(result, calls, claims)
    assert (logs["output"] or {})["total"] == 2
    assert reported in str(result["answer"])
