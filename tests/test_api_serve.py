"""``superbiz serve``: a real multi-worker server on PostgreSQL, and the binds it refuses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

import apps.cli.main as cli
from tests.prometheus_kit import free_port

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "order-service 为什么报 500 错误？"
ALICE = {"Authorization": "Bearer key-alice"}
BOB = {"X-API-Key": "key-bob"}


@dataclass
class Server:
    """A running ``superbiz serve``: its base URL, its log file, its process."""

    url: str
    log: Path
    proc: subprocess.Popen[bytes]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop the server and its workers (the whole process group)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def _wait_healthy(proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
    for _ in range(600):  # up to about 60 s for the workers to start
        if proc.poll() is not None:
            pytest.fail(f"superbiz serve exited with {proc.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    pytest.fail(f"superbiz serve did not become healthy:\n{log.read_text()}")


def _start(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "apps.cli", "serve", *argv],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SUPERBIZ_", "OPENAI_")) and k != "PYTEST_CURRENT_TEST"
    }
    env.update(XDG_DATA_HOME=str(tmp / "xdg"), **extra)
    return env


@contextmanager
def served(tmp: Path, argv: list[str], **extra: str) -> Iterator[Server]:
    """``superbiz serve *argv`` on a free loopback port for the block, once it is healthy.

    Its log is ``tmp/server.log``; ``extra`` are variables of its environment (``_env``).
    """
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp / "server.log"
    proc = _start([*argv, "--port", str(port)], _env(tmp, **extra), log)
    try:
        _wait_healthy(proc, url, log)
        yield Server(url, log, proc)
    finally:
        _stop(proc)


@pytest.fixture(scope="module")
def server(postgres_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with served(
        tmp_path_factory.mktemp("serve"),
        ["--workers", "2", "--db", postgres_url],
        SUPERBIZ_API_KEYS="key-alice=alice,key-bob=bob",
        SUPERBIZ_DB_POOL_SIZE="7",
        SUPERBIZ_API_RATE_PER_MIN="100000",
    ) as running:
        yield running


def post_chat(client: httpx.Client, headers: dict[str, str], **body: Any) -> httpx.Response:
    return client.post("/api/chat", json={"question": QUESTION, **body}, headers=headers)


def test_serve_health_check_reports_the_database(server: Server) -> None:
    response = httpx.get(f"{server.url}/healthz", timeout=10)

    assert response.status_code == 200
    assert (response.json()["status"], response.json()["database"]) == ("ok", "ok")
    assert response.json()["backends"]["sample"]["status"] == "ok"
    assert "2 API key(s) configured" in server.log.read_text()


def test_serve_prints_the_web_page_address(server: Server) -> None:
    assert f"superbiz: the web page: {server.url}/\n" in server.log.read_text()


def test_serve_same_thread_concurrently_one_request_wins_the_other_gets_409(
    server: Server,
) -> None:
    outcome: list[httpx.Response] = []
    thread = ""
    with httpx.Client(base_url=server.url, timeout=120) as client:
        for _ in range(20):  # fire pairs until they overlap
            thread = f"race-{uuid.uuid4().hex[:12]}"
            barrier = threading.Barrier(2)

            def fire(thread_id: str = thread, gate: threading.Barrier = barrier) -> httpx.Response:
                gate.wait()
                return post_chat(client, ALICE, thread_id=thread_id)

            with ThreadPoolExecutor(max_workers=2) as pool:
                outcome = list(pool.map(lambda _: fire(), range(2)))
            if sorted(r.status_code for r in outcome) == [200, 409]:
                break
        statuses = sorted(r.status_code for r in outcome)
        listing = client.get(f"/api/threads/{thread}/diagnoses", headers=ALICE).json()

    assert statuses == [200, 409]
    refused = next(r for r in outcome if r.status_code == 409)
    assert "already being diagnosed" in refused.json()["error"]
    assert len(listing["diagnoses"]) == 1  # never a fork


def test_serve_fifty_concurrent_diagnoses_all_complete(server: Server) -> None:
    threads = [f"load-{i}-{uuid.uuid4().hex[:8]}" for i in range(50)]
    with (
        httpx.Client(
            base_url=server.url, timeout=300, limits=httpx.Limits(max_connections=60)
        ) as client,
        ThreadPoolExecutor(max_workers=50) as pool,
    ):
        responses = list(pool.map(lambda t: post_chat(client, ALICE, thread_id=t), threads))

    assert [r.status_code for r in responses] == [200] * 50, [
        r.text for r in responses if r.status_code != 200
    ][:3]
    bodies = [r.json() for r in responses]
    assert [b["thread_id"] for b in bodies] == threads
    assert {b["verdict"] for b in bodies} == {"PASS"}
    assert len({b["diagnosis_id"] for b in bodies}) == 50


def test_serve_other_users_thread_is_not_found(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=120) as client:
        mine = post_chat(client, ALICE).json()
        thread, diagnosis = mine["thread_id"], mine["diagnosis_id"]

        assert client.get(f"/api/diagnoses/{diagnosis}", headers=BOB).status_code == 404
        assert client.get(f"/api/threads/{thread}/diagnoses", headers=BOB).status_code == 404
        assert post_chat(client, BOB, thread_id=thread).status_code == 404
        assert client.get(f"/api/diagnoses/{diagnosis}", headers=ALICE).status_code == 200
        assert client.get(f"/api/diagnoses/{diagnosis}").status_code == 401


def test_serve_without_keys_binds_loopback_and_says_access_is_open(tmp_path: Path) -> None:
    with served(tmp_path, ["--db", f"sqlite:///{tmp_path / 'db.sqlite'}"]) as running:
        answer = httpx.post(f"{running.url}/api/chat", json={"question": QUESTION}, timeout=120)

    assert "access is open" in running.log.read_text()
    assert answer.status_code == 200
    assert answer.json()["verdict"] == "PASS"


@pytest.fixture
def no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SUPERBIZ_API_KEYS", raising=False)
    monkeypatch.delenv("SUPERBIZ_API_KEYS_FILE", raising=False)


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "::"])
def test_serve_refuses_a_public_bind_without_keys(
    host: str, no_keys: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["serve", "--host", host, "--db", f"sqlite:///{tmp_path / 'db.sqlite'}"])

    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"superbiz: error: refusing to serve on {host} without API keys")
    assert err.count("\n") == 1
    assert not (tmp_path / "db.sqlite").exists()


def test_serve_refuses_several_workers_on_sqlite(
    no_keys: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["serve", "--workers", "2", "--db", f"sqlite:///{tmp_path / 'db.sqlite'}"])

    err = capsys.readouterr().err
    assert code == 2
    assert "--workers 2 needs PostgreSQL" in err
    assert err.count("\n") == 1


def test_serve_refuses_a_malformed_keys_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = tmp_path / "keys"
    keys.write_text("just-a-key\n", encoding="utf-8")
    monkeypatch.delenv("SUPERBIZ_API_KEYS", raising=False)
    monkeypatch.setenv("SUPERBIZ_API_KEYS_FILE", str(keys))

    code = cli.main(["serve", "--host", "0.0.0.0", "--db", f"sqlite:///{tmp_path / 'db'}"])

    assert code == 2
    assert "expected key=identity" in capsys.readouterr().err


def test_serve_refuses_an_invalid_backend_configuration(
    no_keys: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("SUPERBIZ_PROMETHEUS_URL", raising=False)
    monkeypatch.setenv("SUPERBIZ_PROMETHEUS_TOKEN", "secret-token-value")

    code = cli.main(["serve", "--db", f"sqlite:///{tmp_path / 'db.sqlite'}"])

    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("superbiz: error: ")
    assert "SUPERBIZ_PROMETHEUS" in err
    assert "secret-token-value" not in err
    assert "database" not in err
    assert err.count("\n") == 1
    assert not (tmp_path / "db.sqlite").exists()


def test_serve_closes_connections_whose_body_never_arrives(tmp_path: Path) -> None:
    import socket

    with served(
        tmp_path,
        ["--db", f"sqlite:///{tmp_path / 'db.sqlite'}"],
        SUPERBIZ_API_BODY_TIMEOUT_S="1",
    ) as server:
        host, port = server.url.removeprefix("http://").split(":")
        clients = []
        for _ in range(50):
            client = socket.create_connection((host, int(port)), timeout=15)
            client.sendall(
                b"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"quest'
            )
            clients.append(client)
        answers = []
        for client in clients:
            received = b""
            while chunk := client.recv(65536):  # until the server closes the connection
                received += chunk
            answers.append(received)
            client.close()

    assert all(a.startswith(b"HTTP/1.1 408 ") for a in answers), answers[:2]
