"""Real third-party MCP servers from PyPI as evidence sources.

``prometheus-mcp-server`` (on FastMCP) is pointed at the real Prometheus the tests start
(``tests/prometheus_kit.py``) and ``alertmanager-mcp-server`` at its Alertmanager. They need
their own virtual environment (``.venv-mcp`` beside the checkout's ``.venv``: they pin the SDK's
1.x line, and the Alertmanager one asks for Python 3.12 while running on 3.11), which ``.ci/run``
creates; without it the tests skip (fail in CI). A model-mode diagnosis through a local fake
OpenAI-compatible endpoint cites the MCP results: an excerpt that is in the result passes the
Gatekeeper, one that is not fails it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from evidence.composed import configured_backend
from evidence.config import load_settings
from evidence.mcp.settings import parse_servers
from evidence.mcp.tools import offer, withdraw_all
from graph.compile import RunStores, compile_graph
from models.factory import make_model_factory
from persistence.ledger import InMemoryLedger
from state.context import Context
from tests.components import component_unavailable
from tests.mcp_kit import ScriptedMcpModel, scripted_mcp_model
from tests.prometheus_kit import Stack, free_port, prometheus_stack  # noqa: F401 (the fixture)
from tests.serving_kit import ROOT
from tests.test_models_http import role_of
from tools.runner import ToolRunner

pytestmark = pytest.mark.slow  # starts servers and programs (tests/conftest.py)

VENV = ROOT / ".venv-mcp" / "bin"
PROMETHEUS_MCP = VENV / "prometheus-mcp-server"
ALERTMANAGER_MCP = VENV / "alertmanager-mcp-server"
QUESTION = "Why is the order-service queue backing up?"


@pytest.fixture(autouse=True)
def _withdrawn() -> Iterator[None]:
    yield
    withdraw_all()


def _needs(program: Path) -> None:
    if not program.exists():
        component_unavailable(
            program.name,
            f"{program} is missing; create it: python3 -m venv .venv-mcp && .venv-mcp/bin/pip "
            "install --ignore-requires-python prometheus-mcp-server alertmanager-mcp-server",
        )


def _prometheus_server(stack: Stack) -> dict[str, Any]:
    _needs(PROMETHEUS_MCP)
    return {
        "command": str(PROMETHEUS_MCP),
        "env": {"PROMETHEUS_URL": stack.prometheus_url},
        "timeout_s": 60,
    }


def _call(runner: ToolRunner, tool: str, args: dict[str, Any], call_id: str = "c1") -> Any:
    return runner.run(
        {"name": tool, "args": args, "id": call_id}, diagnosis_id="d1", thread_id="t1", round=1
    )


def _texts(invocation: Any) -> dict[str, str]:
    return {r["raw_path"]: r["text"] for r in invocation["retrieval_details"]["evidence_refs"]}


def test_mcp_prometheus_server_results_are_citable_evidence(
    prometheus_stack: Stack,  # noqa: F811
) -> None:
    part = offer(parse_servers({"prom": _prometheus_server(prometheus_stack)}))
    (server,) = part.servers
    assert server.error is None, server.error
    assert {"execute_query", "execute_range_query", "list_metrics"} <= set(server.offered)
    (report,) = part.checks()
    assert report["status"] == "ok" and "Prometheus MCP" in report["detail"]
    runner = ToolRunner(configured_backend(load_settings({}), progress=None), InMemoryLedger())
    invocation = _call(runner, "prom_execute_query", {"query": "order_queue_depth"})
    assert invocation["status"] == "ok", invocation["error"]
    texts = _texts(invocation)
    line = next(text for text in texts.values() if "order_queue_depth" in text)
    assert '"service": "order-service"' in line and '"120"' in line
    assert texts["summary"].startswith("prom_execute_query query=order_queue_depth matched")
    refused = _call(runner, "prom_execute_query", {"query": "sum(("}, "c2")
    assert refused["status"] == "error" and "MCP server 'prom'" in str(refused["error"])


def test_mcp_alertmanager_server_offers_only_the_tools_listed(
    prometheus_stack: Stack,  # noqa: F811
) -> None:
    _needs(ALERTMANAGER_MCP)
    table = {
        "command": str(ALERTMANAGER_MCP),
        "env": {"ALERTMANAGER_URL": prometheus_stack.alertmanager_url},
        "timeout_s": 60,
    }
    unlisted = offer(parse_servers({"am": table})).servers[0]
    assert unlisted.error is None, unlisted.error
    assert unlisted.offered == []  # none of its tools is annotated read-only
    assert "not annotated read-only" in unlisted.refused["post_silence"]
    withdraw_all()
    listed = offer(
        parse_servers({"am": {**table, "tools": ["get_alerts", "get_silences"]}})
    ).servers[0]
    assert sorted(listed.offered) == ["get_alerts", "get_silences"]
    assert listed.refused["delete_silence"] == "not in tools"
    runner = ToolRunner(configured_backend(load_settings({}), progress=None), InMemoryLedger())
    alerts = _call(runner, "am_get_alerts", {})
    assert alerts["status"] == "ok", alerts["error"]
    assert any("HighErrorRate" in text for text in _texts(alerts).values())
    silences = _call(runner, "am_get_silences", {}, "c2")
    assert any("PaymentRetries" in text for text in _texts(silences).values())


def test_mcp_alertmanager_server_over_streamable_http_with_a_bearer_header(
    prometheus_stack: Stack,  # noqa: F811
    tmp_path: Path,
) -> None:
    _needs(ALERTMANAGER_MCP)
    port = free_port()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "ALERTMANAGER_URL": prometheus_stack.alertmanager_url,
        "MCP_API_KEY": "am-secret-key-7",
    }
    log = (tmp_path / "am-mcp.log").open("w")
    process = subprocess.Popen(
        [str(ALERTMANAGER_MCP), "--transport", "http", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=log,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, (tmp_path / "am-mcp.log").read_text()
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline, "alertmanager-mcp-server did not start"
            time.sleep(0.2)
        url = f"http://127.0.0.1:{port}/mcp"
        wrong = offer(
            parse_servers({"am": {"url": url, "headers": {"Authorization": "Bearer nope-nope"}}})
        ).servers[0]
        assert wrong.error is not None and "MCP server 'am'" in wrong.error
        assert "nope-nope" not in wrong.error
        withdraw_all()
        table = {
            "url": url,
            "headers": {"Authorization": "Bearer am-secret-key-7"},
            "tools": ["get_alerts"],
        }
        server = offer(parse_servers({"am": table})).servers[0]
        assert server.error is None, server.error
        report = server.check()
        assert report["status"] == "ok" and "am-secret-key-7" not in json.dumps(report)
        runner = ToolRunner(configured_backend(load_settings({}), progress=None), InMemoryLedger())
        alerts = _call(runner, "am_get_alerts", {})
        assert alerts["status"] == "ok", alerts["error"]
        assert any("QueueBacklog" in text for text in _texts(alerts).values())
    finally:
        process.terminate()
        process.wait(10)
        log.close()


# --------------------------------------------------------------------------- a model-mode run


def _diagnose(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, *, cite_wrong: bool
) -> tuple[dict[str, Any], ScriptedMcpModel]:
    with scripted_mcp_model(
        "prom_execute_query",
        {"query": "order_queue_depth"},
        '"service": "order-service"',
        cite_wrong=cite_wrong,
    ) as script:
        for name, value in script.env().items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("SUPERBIZ_MODEL", "fake-model")
        monkeypatch.setenv("SUPERBIZ_MCP_SERVERS", json.dumps({"prom": _prometheus_server(stack)}))
        backend = configured_backend(progress=None)
        graph = compile_graph(RunStores(InMemorySaver()), backend, get_model=make_model_factory())
        config: Any = {"configurable": {"thread_id": "thread-mcp"}}
        graph.invoke({"messages": [HumanMessage(QUESTION)]}, config, context=Context(offline=False))
        return dict(graph.get_state(config).values), script


def test_mcp_model_mode_claims_citing_an_mcp_result_pass_the_gatekeeper(
    prometheus_stack: Stack,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state, script = _diagnose(prometheus_stack, monkeypatch, cite_wrong=False)
    executor = [body for body in script.requests if role_of(body) == "executor"]
    offered = {tool["function"]["name"] for tool in executor[0]["tools"]}
    assert {"prom_execute_query", "query_logs", "query_metrics"} <= offered
    gate = state["gatekeeper_result"]
    assert gate["status"] == "pass", gate["errors"]
    assert gate["verified_excerpts"]["c1"]
    binding = state["structured_output"]["claims"][0]["evidence_bindings"][0]
    assert binding["tool_name"] == "prom_execute_query"
    assert state["verdict"] == "PASS"


def test_mcp_model_mode_an_excerpt_not_in_the_mcp_result_fails_the_gatekeeper(
    prometheus_stack: Stack,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state, _ = _diagnose(prometheus_stack, monkeypatch, cite_wrong=True)
    gate = state["gatekeeper_result"]
    assert gate["status"] == "fail"
    assert not gate["verified_excerpts"].get("c1")
    assert state["verdict"] == "REJECT"
    assert any("claims[0]" in str(finding["target"]) for finding in gate["errors"])


def test_mcp_third_party_servers_are_installed_for_the_tests() -> None:
    for program in (PROMETHEUS_MCP, ALERTMANAGER_MCP):
        _needs(program)
        assert program.stat().st_mode & 0o111
    assert Path(PROMETHEUS_MCP).parent == VENV
