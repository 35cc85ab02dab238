"""An MCP server's result as verified evidence of a diagnosis asked through the HTTP API, and on
the diagnosis page in Debian's Chromium (through Playwright) like any other invocation.

The server is the tests' own (``tests/mcp_edge_server.py``, over stdio); the model is a local fake
OpenAI-compatible endpoint whose executor calls the MCP tool and cites one line of its result.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn

from apps.http.api import create_app
from evidence.mcp.tools import withdraw_all
from tests.mcp_kit import scripted_mcp_model
from tests.prometheus_kit import free_port
from tests.serving_kit import ROOT
from tests.test_web import browser, page  # noqa: F401 (the fixtures)

pytestmark = pytest.mark.slow  # starts servers and programs (tests/conftest.py)

KEYS = {"key-alice": "alice"}
EDGE = str(ROOT / "tests" / "mcp_edge_server.py")
CITED = "HikariPool-1 active connections 50 of 50"


@pytest.fixture
def site(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Iterator[tuple[str, str]]:
    """The API (with its pages) diagnosing in model mode with the edge MCP server's tools."""
    servers = {"edge": {"command": sys.executable, "args": [EDGE], "timeout_s": 30}}
    with scripted_mcp_model(
        "edge_incident_lines", {"service": "order-service"}, "HikariPool-1"
    ) as script:
        for name, value in script.env().items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("SUPERBIZ_MODEL", "fake-model")
        monkeypatch.setenv("SUPERBIZ_MCP_SERVERS", json.dumps(servers))
        app = create_app(f"sqlite:///{tmp_path / 'web.sqlite'}", api_keys=KEYS)
        port = free_port()
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)
        url = f"http://127.0.0.1:{port}"
        try:
            answer = httpx.post(
                f"{url}/api/chat",
                json={"question": "Why does order-service return 500 errors?"},
                headers={"Authorization": "Bearer key-alice"},
                timeout=180,
            )
            assert answer.status_code == 200, answer.text
            yield url, str(answer.json()["diagnosis_id"])
        finally:
            server.should_exit = True
            thread.join(30)
            withdraw_all()


def test_mcp_result_is_verified_evidence_shown_on_the_diagnosis_page(
    site: tuple[str, str],
    page: Any,  # noqa: F811
) -> None:
    url, diagnosis_id = site
    record = httpx.get(
        f"{url}/api/diagnoses/{diagnosis_id}",
        headers={"Authorization": "Bearer key-alice"},
        timeout=10,
    ).json()
    (invocation,) = [i for i in record["invocations"] if i["tool_name"] == "edge_incident_lines"]
    evaluation = record["self_evaluation"]["verifier_evaluation"]
    assert evaluation["gatekeeper_result"]["status"] == "pass"
    assert evaluation["gatekeeper_result"]["verified_excerpts"]["c1"]

    page.goto(f"{url}/diagnoses/{diagnosis_id}#key=key-alice")
    page.wait_for_selector("body[data-ready=true]")
    table = page.locator(f'table.entries[data-array="{invocation["invocation_id"]} lines"]')
    assert table.count() == 1
    cited = table.locator('tr.cited[data-path="lines[1]"]')
    assert cited.count() == 1 and CITED in cited.inner_text()
    assert page.locator('[data-claim="c1"] .binding.verified').count() == 1
    assert CITED in page.locator('[data-claim="c1"] .ref').inner_text()
    assert not page.problems and not page.failed
