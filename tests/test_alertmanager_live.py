"""Real Prometheus -> real Alertmanager -> a live ``superbiz serve``: an alert that fires is
diagnosed once, verified, listed, and its answer reaches the team's incoming webhook.

Prometheus (Debian's 2.42) evaluates the incident rules of ``tests/prometheus_kit.py`` against
the session's exporter and sends its alerts to an Alertmanager (Debian's 0.25) whose only
webhook receiver is the README's configuration: ``url`` and ``http_config.authorization`` with
an API key, ``group_wait: 1s`` and a ``repeat_interval`` of seconds so the repeat comes during
the test.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.prometheus_kit import (
    RULES,
    Stack,
    free_port,
    get_json,
    start_alertmanager,
    start_prometheus,
    write_prometheus_config,
)
from tests.prometheus_kit import _stop as stop_server
from tests.prometheus_kit import _wait as wait_until
from tests.test_api_serve import _env as serve_env
from tests.test_api_serve import _start as start_serve
from tests.test_api_serve import _stop as stop_serve
from tests.test_api_serve import _wait_healthy
from tests.webhook_sink import WebhookSink

KEY = "key-oncall-7f3a"
ONCALL = {"Authorization": f"Bearer {KEY}"}

ALERTMANAGER_CONFIG = """
route:
  receiver: blackhole
  group_by: [alertname, service]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 2s
  routes:
    - receiver: superbiz
      matchers: ['alertname="HighErrorRate"']
receivers:
  - name: blackhole
  - name: superbiz
    webhook_configs:
      - url: {url}/api/alertmanager
        send_resolved: true
        http_config:
          authorization:
            credentials: {key}
"""


@dataclass
class Live:
    url: str
    alertmanager_url: str
    sink: WebhookSink
    log: Path


def _webhook_sends(alertmanager_url: str) -> tuple[float, float]:
    """(notifications sent, failed) by Alertmanager's webhook integration."""
    text = httpx.get(f"{alertmanager_url}/metrics", timeout=5).text

    def total(metric: str) -> float:
        pattern = rf'^{metric}{{[^}}]*integration="webhook"[^}}]*}} (\S+)$'
        return sum(float(v) for v in re.findall(pattern, text, re.MULTILINE))

    return total("alertmanager_notifications_total"), total(
        "alertmanager_notifications_failed_total"
    )


@pytest.fixture(scope="module")
def live(
    prometheus_stack: Stack, postgres_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Live]:
    root = tmp_path_factory.mktemp("alertmanager-live")
    serve_port, am_port, prom_port = free_port(), free_port(), free_port()
    url = f"http://127.0.0.1:{serve_port}"
    sink = WebhookSink()
    processes: list[subprocess.Popen[bytes]] = []
    with sink.running():
        log = root / "serve.log"
        env = serve_env(
            root,
            SUPERBIZ_API_KEYS=f"{KEY}=oncall",
            SUPERBIZ_API_RATE_PER_MIN="100000",
            SUPERBIZ_PROMETHEUS_URL=f"http://127.0.0.1:{prom_port}",
            SUPERBIZ_NOTIFY_WEBHOOK_URL=sink.url,
            SUPERBIZ_LANGUAGE="en",
        )
        serve = start_serve(
            ["--workers", "2", "--db", postgres_url, "--port", str(serve_port)], env, log
        )
        try:
            _wait_healthy(serve, url, log)
            exporter_port = prometheus_stack.exporter_port
            write_prometheus_config(root, RULES, "incident", exporter_port, am_port)
            (root / "tsdb").mkdir()
            config = ALERTMANAGER_CONFIG.format(url=url, key=KEY)
            alertmanager = start_alertmanager(root, am_port, config)
            processes.append(alertmanager)
            am_url = f"http://127.0.0.1:{am_port}"
            wait_until(
                "Alertmanager ready", lambda: get_json(f"{am_url}/api/v2/status"), 30, alertmanager
            )
            processes.append(start_prometheus(root, prom_port, root / "tsdb"))
            yield Live(url, am_url, sink, log)
        finally:
            for process in reversed(processes):
                stop_server(process)
            stop_serve(serve)


def _investigations(live: Live) -> list[dict[str, Any]]:
    response = httpx.get(f"{live.url}/api/alerts", headers=ONCALL, timeout=10)
    assert response.status_code == 200, response.text
    rows: list[dict[str, Any]] = response.json()["alerts"]
    return rows


def test_alertmanager_firing_alert_is_diagnosed_once_and_the_team_is_notified(
    live: Live,
) -> None:
    deadline = time.monotonic() + 180
    rows: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        rows = _investigations(live)
        if rows and rows[0]["status"] in ("done", "failed"):
            break
        time.sleep(0.5)
    assert rows and rows[0]["status"] == "done", (rows, live.log.read_text()[-3000:])
    (row,) = rows
    assert row["verdict"] == "PASS"
    assert [(a["alert_name"], a["service"]) for a in row["alerts"]] == [
        ("HighErrorRate", "order-service")
    ]
    record = httpx.get(
        f"{live.url}/api/diagnoses/{row['diagnosis_id']}", headers=ONCALL, timeout=10
    ).json()
    answer = str(record["final_answer"])
    assert "HighErrorRate" in answer and "order-service" in answer, answer
    assert "threshold=0.05" in answer, answer

    sent_before, _ = _webhook_sends(live.alertmanager_url)
    deadline = time.monotonic() + 60  # Alertmanager repeats the group (repeat_interval 2s)
    while _webhook_sends(live.alertmanager_url)[0] < sent_before + 2:
        assert time.monotonic() < deadline, "Alertmanager sent no repeat notification"
        time.sleep(0.5)
    _, failed = _webhook_sends(live.alertmanager_url)
    assert failed == 0
    assert len(_investigations(live)) == 1
    thread = httpx.get(
        f"{live.url}/api/threads/{row['thread_id']}/diagnoses", headers=ONCALL, timeout=10
    ).json()
    assert [d["id"] for d in thread["diagnoses"]] == [row["diagnosis_id"]]

    (notification,) = live.sink.wait_for(1, timeout=60)
    text = notification["text"]
    assert text.startswith("superbiz: HighErrorRate (order-service): verdict PASS, score")
    assert answer.strip() in text
    assert text.endswith(f"Details: {live.url}/api/diagnoses/{row['diagnosis_id']}")
