"""``langgraph dev`` serves the graph of ``langgraph.json`` to standard LangGraph clients.

Each server is a real subprocess in its own process group (killed whatever happens), started
once per configuration: the default one (no ``SUPERBIZ_DATABASE_URL``: checkpoints and audit rows
in the embedded SQLite file of a throw-away data directory) and one on the test session's PostgreSQL
database. A server runs with its working folder in a temporary directory, so its
``.langgraph_api/`` files land there, from a copy of the project's ``langgraph.json`` whose
relative paths are resolved against the project. Models are offline, telemetry is off.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from langgraph_sdk import get_sync_client
from langgraph_sdk.client import SyncLangGraphClient
from langgraph_sdk.schema import StreamMode

from graph.builder import NODES
from state.context import Context
from tests.prometheus_kit import free_port
from tests.test_alert_receiver import recorded

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "order-service 为什么报 500？"
CHAT_INPUT: dict[str, Any] = {"messages": [{"role": "user", "content": QUESTION}]}
STARTUP_TIMEOUT_S = 60.0
ROUTER_EDGES = {
    ("executor", "tools"),
    ("executor", "evidence"),
    ("verifier", "composer"),
    ("verifier", "retry"),
}


def _resolve(spec: str) -> str:
    """``./apps/x.py:graph`` -> ``<project>/apps/x.py:graph`` (module specs unchanged)."""
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
    for section, key in (("checkpointer", "path"), ("http", "app"), ("auth", "path")):
        if isinstance(config.get(section), dict) and key in config[section]:
            config[section][key] = _resolve(config[section][key])
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
    """A running server: its base URL, working folder, log file and process (group) id."""

    url: str
    workdir: Path
    log: Path
    pid: int = 0

    def output(self) -> str:
        """What the server printed so far."""
        return self.log.read_text(encoding="utf-8", errors="replace")


def _offline_env(**extra: str) -> dict[str, str]:
    """This process's environment without model or superbiz settings, telemetry off."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "SUPERBIZ_"))}
    env.update(
        LANGSMITH_TRACING="false",
        LANGGRAPH_CLI_NO_ANALYTICS="1",
        LANGGRAPH_NO_VERSION_CHECK="true",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


@contextmanager
def _running_server(workdir: Path, env: dict[str, str]) -> Iterator[Server]:
    """Start ``langgraph dev`` on a free loopback port; stop its process group on exit."""
    config = _server_config(workdir)
    port = free_port()
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
            yield Server(url=url, workdir=workdir, log=log_path, pid=proc.pid)
        finally:
            _stop(proc)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The default configuration: the embedded SQLite file, in a throw-away data directory."""
    workdir = tmp_path_factory.mktemp("langgraph-dev")
    env = _offline_env(XDG_DATA_HOME=str(workdir / "data"))
    with _running_server(workdir, env) as running:
        yield running


@pytest.fixture(scope="module")
def postgres_server(
    tmp_path_factory: pytest.TempPathFactory, postgres_url: str
) -> Iterator[Server]:
    """``SUPERBIZ_DATABASE_URL`` names the test session's PostgreSQL database."""
    workdir = tmp_path_factory.mktemp("langgraph-dev-postgres")
    env = _offline_env(XDG_DATA_HOME=str(workdir / "data"), SUPERBIZ_DATABASE_URL=postgres_url)
    with _running_server(workdir, env) as running:
        yield running


def _superbiz_assistant(url: str) -> dict[str, Any]:
    client = get_sync_client(url=url)
    assistants = client.assistants.search(graph_id="superbiz")
    assert assistants, "the server registered no assistant for the superbiz graph"
    assistant: dict[str, Any] = dict(assistants[0])
    return assistant


def _final_values(result: list[dict[str, Any]] | dict[str, Any]) -> dict[str, Any]:
    """The final state values ``runs.wait`` returned for a finished run."""
    assert isinstance(result, dict), result
    return result


def _thread_values(client: SyncLangGraphClient, thread_id: str) -> dict[str, Any]:
    """The thread's current state values."""
    values = client.threads.get_state(thread_id)["values"]
    assert isinstance(values, dict), values
    return values


def _assert_pass_answer(result: dict[str, Any]) -> str:
    messages = result["messages"]
    assert messages[0]["type"] == "human"
    final = messages[-1]
    assert final["type"] == "ai"
    answer: str = final["content"]
    assert "校验结论：PASS" in answer
    assert result["verdict"] == "PASS"
    assert result["diagnosis_id"].startswith("diag-")
    return answer


def _assert_no_blocking_error(server: Server) -> None:
    # langgraph dev raises BlockingError for sync I/O on its event loop; the sync SQL stores run
    # inside sync nodes, which the server executes in worker threads.
    assert "BlockingError" not in server.output()
    assert "blocking call" not in server.output()


def test_langgraph_dev_chat_run_answers_with_a_pass_verdict(server: Server) -> None:
    client = get_sync_client(url=server.url)
    thread = client.threads.create()

    result = _final_values(client.runs.wait(thread["thread_id"], "superbiz", input=CHAT_INPUT))

    answer = _assert_pass_answer(result)
    assert "【结论（已确认的事实）】" in answer
    assert "[inv-" in answer
    assert "离线模式" in answer
    assert "answer_version" not in answer
    # The thread keeps the conversation: question then answer.
    values = _thread_values(client, thread["thread_id"])
    assert [m["type"] for m in values["messages"]] == ["human", "ai"]
    assert values["messages"][-1]["content"] == answer
    _assert_no_blocking_error(server)


def test_langgraph_dev_streams_stage_events_in_order(server: Server) -> None:
    client = get_sync_client(url=server.url)
    thread = client.threads.create()

    events = [
        part.data
        for part in client.runs.stream(
            thread["thread_id"], "superbiz", input=CHAT_INPUT, stream_mode="custom"
        )
        if part.event == "custom"
    ]

    stages = [event["stage"] for event in events]
    wanted = ["intake", "planner", "tool", "verifier", "verdict", "done"]
    positions = [stages.index(stage) for stage in wanted]
    assert positions == sorted(positions), stages
    assert stages[0] == "intake" and stages[-1] == "done"
    assert all(event["round"] == 1 for event in events)
    by_stage = {event["stage"]: event for event in reversed(events)}  # first of each stage
    assert by_stage["intake"]["diagnosis_id"].startswith("diag-")
    assert by_stage["tool"]["invocation_id"] == "inv-1"
    assert by_stage["verdict"]["verdict"] == "PASS"
    assert by_stage["done"]["verdict"] == "PASS"
    # The streamed run ended with the answer on the thread.
    values = _thread_values(client, thread["thread_id"])
    assert "校验结论：PASS" in values["messages"][-1]["content"]


def test_langgraph_dev_run_context_selects_the_answer_language(server: Server) -> None:
    client = get_sync_client(url=server.url)
    thread = client.threads.create()

    result = client.runs.wait(
        thread["thread_id"], "superbiz", input=CHAT_INPUT, context={"language": "en"}
    )

    answer = result["messages"][-1]["content"] if isinstance(result, dict) else ""
    assert "Conclusion (confirmed facts)" in answer
    assert "【结论" not in answer


@pytest.mark.parametrize(
    ("context", "fragment"),
    [
        pytest.param(
            {"max_tool_calls_per_round": "lots"},
            "max_tool_calls_per_round is 'lots': it must be a whole number of at least 1",
            id="lots",
        ),
        pytest.param({"tool_timeout_s": 0}, "tool_timeout_s is 0: it must be a number", id="zero"),
    ],
)
def test_langgraph_dev_run_context_is_checked_with_the_reason(
    server: Server, context: dict[str, Any], fragment: str
) -> None:
    client = get_sync_client(url=server.url)
    thread = client.threads.create()

    result = client.runs.wait(
        thread["thread_id"], "superbiz", input=CHAT_INPUT, context=context, raise_error=False
    )

    assert isinstance(result, dict)
    assert fragment in json.dumps(result.get("__error__"), ensure_ascii=False)
    assert "TypeError" not in json.dumps(result, ensure_ascii=False)


def test_langgraph_dev_graph_endpoint_draws_every_role_node_and_router(server: Server) -> None:
    assistant = _superbiz_assistant(server.url)

    with urllib.request.urlopen(
        f"{server.url}/assistants/{assistant['assistant_id']}/graph", timeout=30
    ) as response:
        drawn = json.loads(response.read())

    node_ids = {node["id"] for node in drawn["nodes"]}
    # The wiring itself is pinned by tests/test_graph_topology.py and the Mermaid snapshot.
    assert node_ids == {"__start__", "__end__", *NODES}
    edges = {(edge["source"], edge["target"]) for edge in drawn["edges"]}
    conditional = {
        (edge["source"], edge["target"]) for edge in drawn["edges"] if edge.get("conditional")
    }
    # The typed routers draw both branches of each as conditional edges, and nothing else is.
    assert conditional == ROUTER_EDGES
    assert {("tools", "executor"), ("retry", "planner"), ("composer", "audit")} <= edges
    assert ("audit", "__end__") in edges


def test_langgraph_dev_context_schema_is_a_form_of_every_setting(server: Server) -> None:
    client = get_sync_client(url=server.url)
    assistant = _superbiz_assistant(server.url)

    schemas: Any = client.assistants.get_schemas(assistant["assistant_id"])

    form = schemas["context_schema"]
    assert form["title"] == "Context"
    properties = form["properties"]
    fields = dataclasses.fields(Context)
    assert set(properties) == {f.name for f in fields}
    for f in fields:
        assert properties[f.name]["description"] == f.metadata["description"], f.name
    assert properties["language"]["enum"] == ["zh", "en"]
    assert properties["composer_mode"]["enum"] == ["template", "model"]
    assert properties["offline"]["type"] == "boolean"
    assert properties["max_tool_calls_per_round"]["type"] == "integer"
    # Chat clients send messages; the output carries them with the verdict fields.
    assert "messages" in schemas["input_schema"]["properties"]
    assert {"messages", "verdict", "diagnosis_id"} <= set(schemas["output_schema"]["properties"])


def test_langgraph_dev_default_database_is_the_cli_sqlite_file(server: Server) -> None:
    client = get_sync_client(url=server.url)
    thread = client.threads.create()

    result = _final_values(client.runs.wait(thread["thread_id"], "superbiz", input=CHAT_INPUT))

    _assert_pass_answer(result)
    # No SUPERBIZ_DATABASE_URL: the CLI's default file under the data directory holds it all.
    database = server.workdir / "data" / "superbiz" / "superbiz.sqlite"
    with sqlite3.connect(database) as conn:
        checkpoints = conn.execute(
            "SELECT count(*) FROM checkpoints WHERE thread_id = ?", (thread["thread_id"],)
        ).fetchone()[0]
        sessions = conn.execute(
            "SELECT id, status, verdict FROM diagnosis_session WHERE thread_id = ?",
            (thread["thread_id"],),
        ).fetchall()
        invocations = conn.execute(
            "SELECT count(*) FROM tool_invocation WHERE thread_id = ?", (thread["thread_id"],)
        ).fetchone()[0]
    assert checkpoints > 0
    assert sessions == [(result["diagnosis_id"], "done", "PASS")]
    assert invocations >= 1
    assert "Using custom checkpointer: MaintainedAsyncSqliteSaver" in server.output()


def test_langgraph_dev_writes_its_working_files_outside_the_project(server: Server) -> None:
    _superbiz_assistant(server.url)

    assert (server.workdir / ".langgraph_api").is_dir()
    # Should a server ever run from the project root, its folder stays out of version control.
    assert ".langgraph_api/" in (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()


def test_langgraph_dev_mounts_the_http_api_beside_its_own_routes(server: Server) -> None:
    config = json.loads((ROOT / "langgraph.json").read_text(encoding="utf-8"))
    assert config["http"]["app"] == "./apps/http/api.py:app"

    with urllib.request.urlopen(f"{server.url}/healthz", timeout=30) as response:
        health = json.loads(response.read())

    assert (health["status"], health["database"]) == ("ok", "ok")
    assert health["backends"]["sample"]["status"] == "ok"
    assert _superbiz_assistant(server.url)["graph_id"] == "superbiz"


def test_langgraph_dev_mounted_api_takes_alertmanager_notifications(server: Server) -> None:
    accepted = httpx.post(f"{server.url}/api/alertmanager", json=recorded("firing"), timeout=30)
    assert accepted.status_code == 202, accepted.text
    diagnosis_id = accepted.json()["accepted"][0]["diagnosis_id"]
    rows: list[dict[str, Any]] = []
    for _ in range(300):
        with urllib.request.urlopen(f"{server.url}/api/alerts", timeout=30) as response:
            rows = json.loads(response.read())["alerts"]
        if rows and rows[0]["status"] in ("done", "failed"):
            break
        time.sleep(0.2)
    assert [(r["diagnosis_id"], r["status"], r["verdict"]) for r in rows] == [
        (diagnosis_id, "done", "PASS")
    ], rows
    _assert_no_blocking_error(server)


@pytest.mark.postgres
def test_langgraph_dev_postgres_holds_checkpoints_and_audit_rows(
    postgres_server: Server, postgres_url: str
) -> None:
    client = get_sync_client(url=postgres_server.url)
    thread = client.threads.create()
    thread_id = thread["thread_id"]

    result = _final_values(client.runs.wait(thread_id, "superbiz", input=CHAT_INPUT))

    _assert_pass_answer(result)
    with psycopg.connect(postgres_url, connect_timeout=5) as conn:
        checkpoints = conn.execute(
            "SELECT count(*) FROM checkpoints WHERE thread_id = %s", (thread_id,)
        ).fetchone()
        sessions = conn.execute(
            "SELECT id, status, verdict, final_answer FROM diagnosis_session WHERE thread_id = %s",
            (thread_id,),
        ).fetchall()
        invocations = conn.execute(
            "SELECT diagnosis_id, invocation_id FROM tool_invocation WHERE thread_id = %s "
            "ORDER BY invocation_id",
            (thread_id,),
        ).fetchall()
    assert checkpoints is not None and checkpoints[0] > 0
    assert len(sessions) == 1
    diagnosis_id, status, verdict, final_answer = sessions[0]
    assert (diagnosis_id, status, verdict) == (result["diagnosis_id"], "done", "PASS")
    assert final_answer == result["messages"][-1]["content"]
    assert invocations and {row[0] for row in invocations} == {diagnosis_id}
    assert invocations[0][1] == "inv-1"
    assert "Using custom checkpointer: MaintainedAsyncPostgresSaver" in postgres_server.output()
    _assert_no_blocking_error(postgres_server)


INTERNAL_MARKERS = (
    "executor_evidence_v2",  # the executor's raw JSON
    "claim_checks",  # the Verifier's reply
    "evidence_refs",  # tool results
    "invocation_id",
    "verification payload",  # the Verifier's input
    "1. query_",  # the offline planner's plan
)


@pytest.mark.parametrize("mode", ["messages", "messages-tuple", "updates", "values"])
def test_langgraph_dev_chat_streams_carry_only_the_composed_answer(
    server: Server, mode: StreamMode
) -> None:
    """What a chat client reads: no planner, executor, tool or Verifier text, only the answer."""
    client = get_sync_client(url=server.url)
    thread = client.threads.create()
    parts = list(
        client.runs.stream(thread["thread_id"], "superbiz", input=CHAT_INPUT, stream_mode=mode)
    )

    texts: list[str] = []
    for part in parts:
        if part.event in ("metadata", "end"):
            continue
        data = json.dumps(part.data, ensure_ascii=False)
        if mode == "values":
            data = json.dumps(part.data.get("messages", []), ensure_ascii=False)
        texts.append(data)
    streamed = "\n".join(texts)
    answer = _thread_values(client, thread["thread_id"])["messages"][-1]["content"]
    assert "校验结论：PASS" in answer
    for marker in INTERNAL_MARKERS:
        assert marker not in streamed.casefold(), (mode, marker)
    if mode.startswith("messages"):
        ai_texts = [
            message.get("content")
            for part in parts
            if part.event.startswith("messages")
            for message in (part.data if isinstance(part.data, list) else [part.data])
            if isinstance(message, dict) and message.get("type", "").startswith("ai")
        ]
        assert ai_texts
        assert all(text in (answer, "") or answer.startswith(text) for text in ai_texts)


def _rollback_then_normal_run(url: str) -> None:
    client = get_sync_client(url=url, timeout=120)
    thread_id = client.threads.create()["thread_id"]
    first = client.runs.create(thread_id, "superbiz", input=CHAT_INPUT)
    second_input: dict[str, Any] = {
        "messages": [{"role": "user", "content": "inventory-service 为什么变慢？"}]
    }
    second = client.runs.create(
        thread_id, "superbiz", input=second_input, multitask_strategy="rollback"
    )

    client.runs.join(thread_id, second["run_id"])
    done = client.runs.get(thread_id, second["run_id"])
    assert done["status"] == "success", done
    # The rolled-back run and its checkpoints are gone: the thread holds only the second question.
    values = _thread_values(client, thread_id)
    humans = [m["content"] for m in values["messages"] if m["type"] == "human"]
    assert humans == ["inventory-service 为什么变慢？"]
    with pytest.raises(httpx.HTTPStatusError) as gone:
        client.runs.get(thread_id, first["run_id"])
    assert gone.value.response.status_code == 404
    # The queue is not frozen: a normal run on another thread finishes.
    other = client.threads.create()["thread_id"]
    _assert_pass_answer(_final_values(client.runs.wait(other, "superbiz", input=CHAT_INPUT)))


def test_langgraph_dev_rollback_then_a_normal_run_finish_on_sqlite(server: Server) -> None:
    _rollback_then_normal_run(server.url)
    assert "adelete_for_runs is not implemented" not in server.output()


@pytest.mark.postgres
def test_langgraph_dev_rollback_then_a_normal_run_finish_on_postgres(
    postgres_server: Server,
) -> None:
    _rollback_then_normal_run(postgres_server.url)
    assert "adelete_for_runs is not implemented" not in postgres_server.output()
