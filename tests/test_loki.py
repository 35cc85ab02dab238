"""query_logs over Loki, against a local stand-in that implements Loki's documented answers.

No Loki server is installable on this machine, so these tests run against ``tests/loki_kit.py``:
a small HTTP server implementing ``query_range`` (streams result, nanosecond timestamps as
strings, ``stats.summary``), ``labels`` and ``label/<name>/values``, and Loki's plain-text errors
(400 parse errors and limits, 401 without a tenant, 504 timeouts). It is not Loki.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from evidence.composed import configured_backend
from evidence.config import load_settings
from evidence.loki import LokiLogs
from state.records import Invocation
from tests.backend_kit import call_tool, evidence_refs, get_healthz, run_doctor, tool_runner
from tests.loki_kit import FakeLoki, Stream, parse_logql, serve_loki
from tools import query_logs
from tools.runner import ToolRunner

NOW = datetime.now(UTC).replace(microsecond=0)


def _ago(minutes: float) -> datetime:
    return NOW - timedelta(minutes=minutes)


def incident_streams() -> list[Stream]:
    """order-service with a level label; payment-service's level only in its lines."""
    return [
        Stream(
            {"service": "order-service", "level": "error", "pod": "order-7d9f"},
            [
                (_ago(9), "Cannot acquire connection from pool (30000 ms)"),
                (_ago(6), '{"level":"error","msg":"Cannot acquire connection from pool"}'),
                (_ago(3), "Cannot acquire connection from pool (30000 ms)"),
                (_ago(2), "upstream reset"),
                (_ago(90), "an error from before the window"),
            ],
        ),
        Stream(
            {"service": "order-service", "level": "info", "pod": "order-7d9f"},
            [(_ago(5), "GET /orders 200")],
        ),
        Stream(
            {"service": "order-service", "level": "ERR"},
            [(_ago(4), "legacy error spelling, no pod label")],
        ),
        Stream(
            {"service": "postgres", "level": "fatal"},
            [(_ago(1), 'database "ghost" does not exist')],
        ),
    ]


def plain_streams() -> list[Stream]:
    """Streams without any level label: the level is found in the lines."""
    return [
        Stream(
            {"service_name": "payment-service"},
            [
                (_ago(8), "2026-03-01T10:00:00Z ERROR card declined"),
                (_ago(7), "level=error msg=retrying"),
                (_ago(6), "INFO all good"),
                (_ago(5), "an error-free line about errors"),
            ],
        )
    ]


@pytest.fixture
def loki() -> Iterator[tuple[FakeLoki, str]]:
    fake = FakeLoki(streams=incident_streams())
    for url in serve_loki(fake):
        yield fake, url


def _call(runner: ToolRunner, args: dict[str, object], call_id: str = "l1") -> Invocation:
    return call_tool(runner, "query_logs", args, call_id)


def _query(url: str, tmp_path: Path, args: dict[str, object], **env: str) -> Invocation:
    """One query_logs call against the Loki at ``url`` (more settings in ``env``)."""
    return _call(tool_runner({"SUPERBIZ_LOKI_URL": url, **env}, tmp_path), args)


def test_loki_logql_uses_the_level_label_and_escapes_text(loki: tuple[FakeLoki, str]) -> None:
    _, url = loki
    backend = LokiLogs(load_settings({"SUPERBIZ_LOKI_URL": url}).backends["loki"])
    logql = backend.logql(service='order"svc', query="pool (30000 ms)", level="ERROR")

    assert logql == (
        '{service="order\\"svc", level=~"(?i)(error|err|eror)"} |~ "(?i)pool \\\\(30000 ms\\\\)"'
    )
    matchers, filters, stages = parse_logql(logql)  # what Loki reads back
    assert matchers == [("service", "=", 'order"svc'), ("level", "=~", "(?i)(error|err|eror)")]
    assert filters == [("|~", r"(?i)pool \(30000 ms\)")]
    assert stages == []


def test_loki_error_lines_of_a_service_newest_first_with_exact_refs(
    loki: tuple[FakeLoki, str], tmp_path: Path
) -> None:
    fake, url = loki
    row = _query(url, tmp_path, {"service": "order-service", "level": "ERROR"})
    refs = evidence_refs(row)

    assert row["status"] == "ok", row["error"]
    request = fake.requests[-1]
    assert request["direction"] == "backward" and request["limit"] == "21"
    assert int(request["end"]) - int(request["start"]) == 3600 * 10**9
    assert refs["logs[0]"].endswith("error order-service order-7d9f: upstream reset")
    assert refs["logs[1]"].endswith(
        "error order-service order-7d9f: Cannot acquire connection from pool (30000 ms)"
    )
    assert refs["logs[2]"].endswith(
        "ERR order-service: legacy error spelling, no pod label"
    )  # no instance: rendered without it, never dropped
    assert refs["logs[3]"].endswith("order-7d9f: Cannot acquire connection from pool")  # msg field
    assert "logs[5]" not in refs  # the info line and the line before the window stay out
    assert re.fullmatch(
        r"query_logs level=ERROR service=order-service window=\S+Z/\S+Z "
        r"matched 5 of 5 \(complete\)",
        refs["summary"],
    ), refs["summary"]


def test_loki_truncated_answer_total_is_at_least_what_loki_reports(
    loki: tuple[FakeLoki, str], tmp_path: Path
) -> None:
    fake, url = loki
    row = _query(url, tmp_path, {"service": "order-service", "level": "error", "limit": 2})
    assert fake.requests[-1]["limit"] == "3"
    assert (row["output"] or {}).get("total_at_least") is True
    assert evidence_refs(row)["summary"].endswith("matched 2 of at least 5 (truncated)")


def test_loki_level_is_a_line_filter_where_streams_carry_no_level_label(tmp_path: Path) -> None:
    fake = FakeLoki(streams=plain_streams())
    for url in serve_loki(fake):
        row = _query(url, tmp_path, {"service": "payment-service", "level": "ERROR"})
        assert fake.requests[-1]["query"] == (
            '{service_name="payment-service"} |~ "(?i)\\\\b(error|err|eror)\\\\b"'
        )
        logs = query_logs.result(row["output"])["logs"]
        assert [(e.get("level"), e["message"]) for e in logs] == [
            (None, "an error-free line about errors"),  # the word is in it: Loki's filter
            ("error", "retrying"),
            ("ERROR", "card declined"),
        ]
        assert {e["service"] for e in logs} == {"payment-service"}


def test_loki_refuses_a_catch_all_query(loki: tuple[FakeLoki, str], tmp_path: Path) -> None:
    fake, url = loki
    runner = tool_runner({"SUPERBIZ_LOKI_URL": url}, tmp_path)
    row = _call(runner, {})
    assert row["status"] == "error"
    assert "needs a service, a level or a text query" in str(row["error"])
    assert not any(r["path"].endswith("query_range") for r in fake.requests)

    text = _call(runner, {"query": "ghost"}, "l2")
    assert fake.requests[-1]["query"] == '{service=~".+"} |~ "(?i)ghost"'
    assert [e["service"] for e in query_logs.result(text["output"])["logs"]] == ["postgres"]


@pytest.mark.parametrize(
    ("change", "status", "said"),
    [
        (
            {"max_entries_limit": 10},
            400,
            "max entries limit per query exceeded, limit > max_entries_limit (21 > 10)",
        ),
        ({"timeout": True}, 504, "Gateway Timeout: query timed out"),
    ],
    ids=["limit", "timeout"],
)
def test_loki_plain_text_errors_become_error_invocations_quoting_the_server(
    loki: tuple[FakeLoki, str], tmp_path: Path, change: dict[str, object], status: int, said: str
) -> None:
    fake, url = loki
    for key, value in change.items():
        setattr(fake, key, value)
    row = _query(url, tmp_path, {"service": "order-service"})
    assert row["status"] == "error"
    assert str(row["error"]) == f"BackendRequestError: Loki answered HTTP {status}: {said}"
    assert row["retrieval_details"]["evidence_refs"] == []


def test_loki_tenant_is_sent_as_x_scope_orgid(loki: tuple[FakeLoki, str], tmp_path: Path) -> None:
    fake, url = loki
    fake.tenant = "team-a"
    missing = _query(url, tmp_path, {"service": "postgres"})
    assert missing["status"] == "error"
    assert "wants a tenant (it answered: no org id); set SUPERBIZ_LOKI_TENANT" in str(
        missing["error"]
    )
    found = _query(
        url, tmp_path, {"service": "postgres", "level": "FATAL"}, SUPERBIZ_LOKI_TENANT="team-a"
    )
    assert found["status"] == "ok", found["error"]
    assert evidence_refs(found)["logs[0]"].endswith(
        'fatal postgres: database "ghost" does not exist'
    )


def test_loki_services_doctor_and_healthz(
    loki: tuple[FakeLoki, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, url = loki
    backend = configured_backend(load_settings({"SUPERBIZ_LOKI_URL": url}, cwd=tmp_path))
    assert backend.services() == ["order-service", "postgres"]

    code, out, _ = run_doctor(monkeypatch, {"SUPERBIZ_LOKI_URL": url})
    assert code == 0
    assert re.fullmatch(
        rf"loki +ok +{re.escape(url)}  labels ok \(3\); label service: 2 services "
        r"\(order-service, postgres\); level label level\n",
        out,
    ), out
    _, body = get_healthz(tmp_path)
    assert body["backends"]["loki"]["status"] == "ok"
    assert json.dumps(body).count("loki") >= 1
