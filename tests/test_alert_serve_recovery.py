"""A ``superbiz serve`` killed while it diagnoses an alert: the next start finishes it.

The diagnosis waits in its planner behind the gate of a local OpenAI-compatible endpoint
(``tests/gated_openai.py``) while the whole server is killed with SIGKILL; a new server on the
same PostgreSQL database takes the investigation back from the queue (its claim expired) and the
diagnosis is resumed to its verified end, never left ``running``.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.gated_openai import gated_openai
from tests.prometheus_kit import free_port
from tests.test_alert_receiver import recorded
from tests.test_api_serve import _env, _start, _stop, _wait_healthy

KEY = {"Authorization": "Bearer key-alice"}
WAIT_S = 90.0


def _alerts(base: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = httpx.get(f"{base}/api/alerts", headers=KEY, timeout=30).json()[
        "alerts"
    ]
    return rows


@pytest.mark.postgres
def test_alert_serve_killed_mid_diagnosis_is_finished_by_the_next_start(
    own_database: tuple[str, str],
    tmp_path: Path,
) -> None:
    url, _ = own_database
    with gated_openai() as endpoint:
        env = _env(
            tmp_path,
            SUPERBIZ_API_KEYS="key-alice=alice",
            SUPERBIZ_LEASE_TTL_S="1",
            SUPERBIZ_SWEEP_INTERVAL_S="0.5",
            SUPERBIZ_ALERT_CLAIM_S="1",
            **endpoint.env(),
        )
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
        first = _start(["--db", url, "--port", str(port)], env, first_log)
        try:
            _wait_healthy(first, base, first_log)
            body = json.dumps(recorded("firing"))
            accepted = httpx.post(
                f"{base}/api/alertmanager",
                content=body,
                headers={**KEY, "Content-Type": "application/json"},
                timeout=30,
            )
            assert accepted.status_code == 202, accepted.text
            assert endpoint.received.wait(WAIT_S), "the alert's diagnosis never called its model"
            (row,) = _alerts(base)
            assert row["status"] == "running"
            os.killpg(first.pid, signal.SIGKILL)
            first.wait(timeout=30)
        finally:
            _stop(first)
        endpoint.gate.set()
        second = _start(["--db", url, "--port", str(port)], env, second_log)
        try:
            _wait_healthy(second, base, second_log)
            deadline = time.monotonic() + WAIT_S
            while time.monotonic() < deadline:
                (row,) = _alerts(base)
                if row["status"] in ("done", "failed"):
                    break
                time.sleep(0.3)
            diagnosis_id = accepted.json()["accepted"][0]["diagnosis_id"]
            record = httpx.get(f"{base}/api/diagnoses/{diagnosis_id}", headers=KEY, timeout=30)
        finally:
            _stop(second)
    assert row["diagnosis_id"] == diagnosis_id
    assert (row["status"], row["verdict"]) == ("done", "PASS"), (row, second_log.read_text())
    assert row["attempts"] >= 1
    assert record.json()["status"] == "done"
    assert record.json()["note"] == "resumed after an interrupted run"
