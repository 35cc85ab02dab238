"""query_logs over OpenSearch ``_search``, against a real in-memory OpenSearch-compatible server.

The server is ``osmem-server`` (PyPI, MIT), started once per session on a free loopback port;
documents are indexed through its HTTP ``_bulk`` API with dynamic mapping (text fields with a
``keyword`` sub-field, as Elasticsearch and OpenSearch make them) and, for the ECS index, an
explicit mapping with nested field names.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from evidence.composed import configured_backend
from evidence.config import load_settings
from state.records import Invocation
from tests.backend_kit import call_tool, evidence_refs, get_healthz, run_doctor, tool_runner
from tests.opensearch_kit import ago as _ago
from tools import query_logs
from tools.runner import ToolRunner


def _call(runner: ToolRunner, args: dict[str, object], call_id: str = "o1") -> Invocation:
    return call_tool(runner, "query_logs", args, call_id)


def _query(env: dict[str, str], tmp_path: Path, args: dict[str, object]) -> Invocation:
    """One query_logs call on a fresh runner over ``env``."""
    return _call(tool_runner(env, tmp_path), args)


@pytest.fixture
def os_env(opensearch_url: str) -> dict[str, str]:
    return {"SUPERBIZ_OPENSEARCH_URL": opensearch_url}


def test_opensearch_errors_of_a_service_newest_first_every_spelling(
    os_env: dict[str, str], tmp_path: Path
) -> None:
    row = _query(os_env, tmp_path, {"service": "order-service", "level": "ERROR"})
    refs = evidence_refs(row)

    assert row["status"] == "ok", row["error"]
    assert [e["message"] for e in query_logs.result(row["output"])["logs"]] == [
        "upstream reset by peer",
        "payment call failed, no host field",
        "Cannot acquire connection from pool: timeout 30000 ms",
        "Cannot acquire connection from pool: timeout 30000 ms",
    ]
    assert refs["logs[0]"] == f"{_ago(3)} ERROR order-service order-1: upstream reset by peer"
    assert refs["logs[1]"] == f"{_ago(5)} err order-service: payment call failed, no host field"
    assert re.fullmatch(
        r"query_logs level=ERROR service=order-service window=\S+Z/\S+Z matched 4 of 4 "
        r"\(complete\)",
        refs["summary"],
    ), refs["summary"]


def test_opensearch_text_is_a_phrase_and_the_limit_truncates(
    os_env: dict[str, str], tmp_path: Path
) -> None:
    runner = tool_runner(os_env, tmp_path)
    phrase = _call(runner, {"query": "acquire connection"}, "o1")
    limited = _call(runner, {"service": "order-service", "limit": 2}, "o2")

    assert [e.get("instance") for e in query_logs.result(phrase["output"])["logs"]] == [
        "order-2",
        "order-1",
    ]
    assert evidence_refs(limited)["summary"].endswith("matched 2 of 5 (truncated)")
    assert (limited["output"] or {}).get("total_at_least") is None


def test_opensearch_total_past_track_total_hits_is_at_least(
    os_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("evidence.opensearch.TRACK_TOTAL_HITS", 3)
    row = _query(os_env, tmp_path, {"service": "order-service", "limit": 2})
    assert (row["output"] or {}).get("total_at_least") is True
    assert evidence_refs(row)["summary"].endswith("matched 2 of at least 3 (truncated)")


def test_opensearch_field_names_are_configurable(opensearch_url: str, tmp_path: Path) -> None:
    env = {
        "SUPERBIZ_OPENSEARCH_URL": opensearch_url,
        "SUPERBIZ_OPENSEARCH_INDEX": "ecs-logs",
        "SUPERBIZ_OPENSEARCH_FIELDS": json.dumps(
            {"level": "log.level", "service": "service.name", "instance": "host.name"}
        ),
    }
    row = _query(env, tmp_path, {"service": "cart", "level": "WARN"})
    refs = evidence_refs(row)
    assert row["status"] == "ok", row["error"]
    assert refs["logs[0]"] == f"{_ago(2)} WARNING cart: cart cache refilled"
    assert refs["logs[1]"] == f"{_ago(6)} warn cart cart-9: cart cache miss storm"
    assert configured_backend(load_settings(env, cwd=tmp_path)).services() == ["cart"]


def test_opensearch_error_bodies_become_error_invocations(
    opensearch_url: str, tmp_path: Path
) -> None:
    def in_index(index: str, args: dict[str, object]) -> Invocation:
        env = {"SUPERBIZ_OPENSEARCH_URL": opensearch_url, "SUPERBIZ_OPENSEARCH_INDEX": index}
        return _query(env, tmp_path, args)

    missing = in_index("nope", {"service": "x"})
    assert missing["status"] == "error"
    assert "index_not_found_exception: no such index [nope]" in str(missing["error"])
    assert "check SUPERBIZ_OPENSEARCH_INDEX" in str(missing["error"])

    empty = in_index("none-*", {"level": "ERROR"})
    assert empty["status"] == "error"  # never a "no errors" answer from no index at all
    assert "no index matches none-*" in str(empty["error"])


def test_opensearch_services_doctor_and_healthz(
    os_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = configured_backend(load_settings(os_env, cwd=tmp_path))
    assert backend.services() == ["order-service", "payment-service", "postgres"]
    code, out, _ = run_doctor(monkeypatch, os_env)
    assert code == 0
    assert re.fullmatch(
        r"opensearch +ok +http://127\.0\.0\.1:\d+  opensearch \S+; index logs-\*: 1 indices; "
        r"3 services \(order-service, payment-service, postgres\)\n",
        out,
    ), out
    monkeypatch.setenv("SUPERBIZ_OPENSEARCH_INDEX", "none-*")
    status, body = get_healthz(tmp_path)
    assert status == 200 and body["database"] == "ok"
    assert body["backends"]["opensearch"]["status"] == "error"
    assert body["backends"]["opensearch"]["setting"] == "SUPERBIZ_OPENSEARCH_INDEX"
