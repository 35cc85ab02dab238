"""``langgraph dev`` serves the graph of ``langgraph.json``: a chat run answers with a verdict.

The server is a real subprocess in its own process group (killed whatever happens). It runs with
its working folder in a temporary directory, so its ``.langgraph_api/`` files land there, from a
copy of the project's ``langgraph.json`` whose relative paths are resolved against the project.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_sync_client

from graph.builder import NODES

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "order-service 为什么报 500？"
STARTUP_TIMEOUT_S = 60.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _resolve(spec: str) -> str:
    """``./graph/app.py:graph`` -> ``<project>/graph/app.py:graph`` (module specs unchanged)."""
    path, sep, attr = spec.partition(":")
    if path.startswith((".", "/")) or path.endswith(".py"):
        path = str((ROOT / path).resolve())
    return f"{path}{sep}{attr}"


def _server_config(workdir: Path) -> Path:
    """The project's ``langgraph.json`` with its paths made absolute, written to ``workdir``."""
    config = json.loads((ROOT / "langgraph.json").read_text(encoding="utf-8"))
    config["dependencies"] = [
        str((ROOT / dep).resolve()) if dep.startswith(".") else dep
        for dep in config.get("dependencies", [])
    ]
    config["graphs"] = {name: _resolve(spec) for name, spec in config["graphs"].items()}
    target = workdir / "langgraph.json"
    target.write_text(json.dumps(config), encoding="utf-8")
    return target


def _langgraph_command() -> list[str]:
    script = Path(sys.executable).with_name("langgraph")
    if not script.exists():
        pytest.fail(f"the langgraph CLI is not installed next to {sys.executable}")
    return [str(script)]


def _ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/ok", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=15)
    except ProcessLookupError:
        pass


@dataclass(frozen=True)
class Server:
    """A running server: its base URL and its working folder."""

    url: str
    workdir: Path


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A ``langgraph dev`` server on a free loopback port, offline models, no telemetry."""
    workdir = tmp_path_factory.mktemp("langgraph-dev")
    config = _server_config(workdir)
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "SUPERBIZ_"))}
    env.update(
        LANGSMITH_TRACING="false",
        LANGGRAPH_CLI_NO_ANALYTICS="1",
        LANGGRAPH_NO_VERSION_CHECK="true",
        PYTHONUNBUFFERED="1",
    )
    log_path = workdir / "server.log"
    url = f"http://127.0.0.1:{port}"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                *_langgraph_command(),
                "dev",
                "--no-browser",
                "--no-reload",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--config",
                str(config),
            ],
            cwd=workdir,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + STARTUP_TIMEOUT_S
            while not _ok(url):
                if proc.poll() is not None or time.monotonic() > deadline:
                    output = log_path.read_text(encoding="utf-8", errors="replace")
                    state = (
                        f"exited with {proc.returncode}"
                        if proc.poll() is not None
                        else f"not healthy after {STARTUP_TIMEOUT_S:.0f} s"
                    )
                    pytest.fail(f"langgraph dev {state}; its output:\n{output[-8000:]}")
                time.sleep(0.5)
            yield Server(url=url, workdir=workdir)
        finally:
            _stop(proc)


def _superbiz_assistant(url: str) -> dict[str, Any]:
    client = get_sync_client(url=url)
    assistants = client.assistants.search(graph_id="superbiz")
    assert assistants, "the server registered no assistant for the superbiz graph"
    assistant: dict[str, Any] = dict(assistants[0])
    return assistant


def test_langgraph_dev_chat_run_answers_with_a_pass_verdict(server: Server) -> None:
    client = get_sync_client(url=server.url)
    thread = client.threads.create()

    chat_input: dict[str, Any] = {"messages": [{"role": "user", "content": QUESTION}]}
    result = client.runs.wait(thread["thread_id"], "superbiz", input=chat_input)

    assert isinstance(result, dict), result
    messages = result["messages"]
    assert messages[0]["type"] == "human"
    final = messages[-1]
    assert final["type"] == "ai"
    answer = final["content"]
    assert "【结论（已确认的事实）】" in answer
    assert "[inv-" in answer
    assert "校验结论：PASS" in answer
    assert "离线模式" in answer
    assert "answer_version" not in answer
    assert result["verdict"] == "PASS"
    assert result["diagnosis_id"].startswith("diag-")
    # The thread keeps the conversation: question then answer.
    values: Any = client.threads.get_state(thread["thread_id"])["values"]
    assert values["messages"][-1]["content"] == answer


def test_langgraph_dev_graph_endpoint_draws_every_role_node(server: Server) -> None:
    assistant = _superbiz_assistant(server.url)

    with urllib.request.urlopen(
        f"{server.url}/assistants/{assistant['assistant_id']}/graph", timeout=30
    ) as response:
        drawn = json.loads(response.read())

    node_ids = {node["id"] for node in drawn["nodes"]}
    expected = {
        "intake",
        "planner",
        "executor",
        "tools",
        "evidence",
        "gatekeeper",
        "verifier",
        "retry",
        "composer",
        "audit",
    }
    assert expected <= node_ids
    assert set(NODES) == expected
    edges = {(edge["source"], edge["target"]) for edge in drawn["edges"]}
    # The routers' typed targets are drawn, so Studio shows both branches of each.
    assert {
        ("executor", "tools"),
        ("executor", "evidence"),
        ("verifier", "composer"),
        ("verifier", "retry"),
        ("retry", "planner"),
        ("composer", "audit"),
    } <= edges


def test_langgraph_dev_writes_its_working_files_outside_the_project(server: Server) -> None:
    _superbiz_assistant(server.url)

    assert (server.workdir / ".langgraph_api").is_dir()
    # Should a server ever run from the project root, its folder stays out of version control.
    assert ".langgraph_api/" in (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
