"""``superbiz serve`` on PostgreSQL recovers: a killed worker's diagnosis, a recreated database.

Real servers (helpers of ``tests/test_api_serve.py``) on PostgreSQL databases of their own. Model
mode talks to a local OpenAI-compatible endpoint whose answers wait behind a gate
(``tests/gated_openai.py``), which holds a diagnosis in a worker for as long as the test needs.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.gated_openai import gated_openai
from tests.test_api_serve import ALICE, QUESTION, served

WAIT_S = 60.0


@pytest.mark.postgres
def test_serve_killed_worker_diagnosis_is_resumed_by_the_sweep(
    own_database: tuple[str, str], tmp_path: Path
) -> None:
    url, _ = own_database
    with (
        gated_openai() as endpoint,
        served(
            tmp_path,
            ["--workers", "2", "--db", url],
            SUPERBIZ_API_KEYS="key-alice=alice",
            SUPERBIZ_LEASE_TTL_S="1",
            SUPERBIZ_SWEEP_INTERVAL_S="0.5",
            **endpoint.env(),
        ) as server,
    ):
        thread = f"killed-{uuid.uuid4().hex[:8]}"
        stream = threading.Thread(
            target=_read_stream, args=(server.url, {"question": QUESTION, "thread_id": thread})
        )
        stream.start()
        assert endpoint.received.wait(WAIT_S), "the diagnosis never called its model"
        lease = _lease(url, thread)
        holder_pid = int(lease["holder"].split(":")[1])
        assert holder_pid != server.proc.pid  # a worker, not the supervisor
        os.kill(holder_pid, signal.SIGKILL)
        endpoint.gate.set()
        stream.join(WAIT_S)
        record = _wait_done(server.url, lease["diagnosis_id"])
    assert record["status"] == "done", record
    assert record["verdict"] == "PASS"
    assert record["note"] == "resumed after an interrupted run"
    assert "resuming orphaned diagnosis" in server.log.read_text()


def _read_stream(base: str, body: dict[str, str]) -> None:
    try:
        with httpx.stream(
            "POST", f"{base}/api/chat_stream", json=body, headers=ALICE, timeout=120
        ) as response:
            for _ in response.iter_bytes():
                pass
    except httpx.HTTPError:  # its worker is killed mid-stream
        return


def _lease(url: str, thread: str) -> dict[str, str]:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        with psycopg.connect(url, connect_timeout=5) as conn:
            row = conn.execute(
                "SELECT diagnosis_id, holder FROM diagnosis_lease WHERE thread_id = %s",
                (thread,),
            ).fetchone()
        if row:
            return {"diagnosis_id": row[0], "holder": row[1]}
        time.sleep(0.1)
    pytest.fail("the diagnosis never took its lease")


def _wait_done(base: str, diagnosis_id: str) -> dict[str, object]:
    deadline = time.monotonic() + WAIT_S
    record: dict[str, object] = {}
    while time.monotonic() < deadline:
        response = httpx.get(f"{base}/api/diagnoses/{diagnosis_id}", headers=ALICE, timeout=30)
        if response.status_code == 200:
            record = response.json()
            if record["status"] != "running":
                return record
        time.sleep(0.2)
    return record


@pytest.mark.postgres
def test_serve_database_dropped_and_recreated_fails_fast_then_recovers(
    own_database: tuple[str, str], tmp_path: Path
) -> None:
    url, admin = own_database
    name = url.rsplit("/", 1)[1]
    with (
        served(tmp_path, ["--db", url], SUPERBIZ_API_KEYS="key-alice=alice") as server,
        httpx.Client(base_url=server.url, timeout=15) as client,  # far below a 30 s pool wait
    ):
        assert client.post("/api/chat", json={"question": QUESTION}, headers=ALICE).is_success
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')

        lost = client.post("/api/chat", json={"question": QUESTION}, headers=ALICE)
        health = client.get("/healthz")

        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        recovered = client.get("/healthz")
        again = client.post("/api/chat", json={"question": QUESTION}, headers=ALICE)
    assert lost.status_code == 503, lost.text
    assert f'database "{name}" does not exist' in lost.json()["error"]
    assert "PoolTimeout" not in lost.text
    assert health.status_code == 503
    assert f'database "{name}" does not exist' in health.json()["error"]
    assert recovered.status_code == 200, recovered.text
    assert again.status_code == 200, again.text
    assert again.json()["verdict"] == "PASS"
