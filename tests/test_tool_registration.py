"""A tool declared and registered here, with no other module edited, is a full tool.

``query_deploys`` (made up for this test: deployments of a service, each with the changes it
shipped) has its own arguments, entry arrays (an array inside each entry), renderers, bounds and
counts. Registered for a test, it is run and bounded by the runner, gets refs (``deploys[0]``,
``deploys[0].changes[1]``, ``summary``), is offered to the executor model, is cited by a claim
the Gatekeeper verifies, appears in the trace summary, is served by a replay, can be planned by
the offline rules, and its entries are drawn by the web page from the display data. A second
tool declares its arguments by a JSON schema and is asked through a closure, as a tool created
at run time from a third-party server's tool list would be.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import Field
from starlette.applications import Starlette
from starlette.testclient import TestClient

from apps.http.api import create_app
from apps.http.web import web_routes
from evidence.replay import ReplayBackend
from evidence.sample import SampleBackend
from graph.builder import build_graph
from graph.runner import run_diagnosis, state_of
from models.budget import GetModel
from models.offline.evidence import Result
from models.offline.rules import parse_steps
from models.offline.writer import binding as offline_binding
from models.scripted import ScriptExhausted, to_message
from nodes.planner import TOOL_LINE_CHARS, tool_lines
from persistence.audit import InMemoryAuditStore
from persistence.ledger import InMemoryLedger
from persistence.ownership import ThreadOwners
from persistence.store import open_persistence
from state.context import Context
from state.records import Invocation
from tests.components import component_unavailable
from tests.prometheus_kit import free_port
from tests.records import claim, executor_output, json_object
from tests.scenario_kit import RecordingChatModel, check, environment, final, verifier_reply
from tools.registry import display_data, registered, spec_of, tool_specs
from tools.render import format_value
from tools.runner import TRUNCATION_MARKER, ToolRunner
from tools.schemas import ToolArgs, optional
from tools.spec import (
    Bounds,
    Call,
    Counts,
    Display,
    EntryArray,
    ModelArguments,
    SchemaArguments,
    ToolSpec,
)
from verification.trace_summary import build_trace_summary

CHROMIUM = "/usr/bin/chromium"

# --------------------------------------------------------------------------- the made-up tool


class DeploysArgs(ToolArgs):
    """Arguments of `query_deploys`."""

    service: str | None = optional("Only deployments of this service (exact name).")
    limit: int = Field(default=5, ge=1, le=50, description="At most this many deployments.")


def deploy_text(entry: dict[str, Any]) -> str:
    """``<at> <service> version=<v> status=<s>``."""
    head = [format_value(entry.get("at")), format_value(entry.get("service"))]
    return " ".join([*head, f"version={entry.get('version')}", f"status={entry.get('status')}"])


def change_text(entry: dict[str, Any]) -> str:
    """``<file>: <summary>``."""
    return f"{entry.get('file')}: {entry.get('summary')}"


DEPLOYS = ToolSpec(
    name="query_deploys",
    description="Deployments of the services, newest first, with the changes each one shipped.",
    arguments=ModelArguments(DeploysArgs, order=("service", "limit")),
    role="incident",
    arrays=(
        EntryArray(
            name="deploys",
            source_type="deploy",
            render=deploy_text,
            display=Display("table", ("at", "service", "version", "status")),
            within=(
                EntryArray(
                    name="changes",
                    source_type="change",
                    render=change_text,
                    display=Display("table", ("file", "summary")),
                ),
            ),
        ),
    ),
    bounds=Bounds(argument="limit", entries=4, field_chars=200),
    counts=Counts(total=True),
)

DEPLOYMENTS: list[dict[str, Any]] = [
    {
        "at": f"2026-03-01T10:0{9 - i}:00Z",
        "service": "order-service",
        "version": f"2.4.{9 - i}",
        "status": "rolled out",
        "changes": [
            {"file": f"pool/config-{j}.yaml", "summary": f"maximumPoolSize {10 - j} -> 5"}
            for j in range(6 if i == 0 else 1)
        ],
    }
    for i in range(7)
] + [
    {
        "at": "2026-03-01T09:00:00Z",
        "service": "payment-service",
        "version": "1.0.0",
        "status": "x" * 500,
        "changes": [],
    }
]


class DeployBackend(SampleBackend):
    """The sample backend, and deployments (the limit is the runner's to apply)."""

    def query_deploys(self, *, service: str | None = None, limit: int = 5) -> dict[str, Any]:
        rows = [row for row in DEPLOYMENTS if service in (None, row["service"])]
        return {"deploys": json.loads(json.dumps(rows)), "total": len(rows)}


@pytest.fixture
def deploys_registered() -> Iterator[None]:
    with registered(DEPLOYS):
        yield


def _offered() -> dict[str, dict[str, Any]]:
    """The functions of the executor's tool list, by name."""
    functions = [json_object(spec["function"]) for spec in tool_specs()]
    return {str(function["name"]): function for function in functions}


def _run(runner: ToolRunner, args: object, call_id: str = "c1") -> Invocation:
    call = {"name": "query_deploys", "args": args, "id": call_id}
    return runner.run(call, diagnosis_id="d1", thread_id="t1", round=1)


# --------------------------------------------------------------------------- runner and refs


def test_tool_registration_runner_bounds_and_refs_it(deploys_registered: None) -> None:
    row = _run(ToolRunner(DeployBackend(environment()), InMemoryLedger()), {"limit": 2})

    assert row["status"] == "ok", row["error"]
    assert row["arguments"] == {"limit": 2}
    output = row["output"]
    assert output is not None
    deploys = output["deploys"]
    assert isinstance(deploys, list) and len(deploys) == 2  # the limit, not the 8 returned
    assert (output["total"], output["truncated"]) == (8, True)
    first = deploys[0]
    assert isinstance(first, dict) and isinstance(first["changes"], list)
    assert len(first["changes"]) == 4  # an inner array keeps Bounds.entries
    paths = [ref["raw_path"] for ref in row["retrieval_details"]["evidence_refs"]]
    assert paths == [
        "deploys[0]",
        *[f"deploys[0].changes[{j}]" for j in range(4)],
        "deploys[1]",
        "deploys[1].changes[0]",
        "summary",
    ]
    refs = {ref["raw_path"]: ref for ref in row["retrieval_details"]["evidence_refs"]}
    assert refs["deploys[0]"]["text"] == (
        "2026-03-01T10:09:00Z order-service version=2.4.9 status=rolled out"
    )
    assert refs["deploys[0].changes[1]"] == {
        "raw_path": "deploys[0].changes[1]",
        "text": "pool/config-1.yaml: maximumPoolSize 9 -> 5",
        "source_type": "change",
    }
    assert refs["summary"]["text"] == "query_deploys limit=2 matched 2 of 8 (truncated)"


def test_tool_registration_runner_caps_fields_and_reports_no_hit(deploys_registered: None) -> None:
    runner = ToolRunner(DeployBackend(environment()), InMemoryLedger())

    payment = _run(runner, {"service": "payment-service"}, "c1")
    nothing = _run(runner, {"service": "cart-service"}, "c2")
    invalid = _run(runner, {"limit": 0}, "c3")

    status = payment["retrieval_details"]["evidence_refs"][0]["text"].split("status=")[1]
    assert status == "x" * 200 + TRUNCATION_MARKER  # the tool's own field cap
    assert (nothing["status"], nothing["retrieval_details"]["evidence_refs"][-1]["text"]) == (
        "no_hit",
        "query_deploys service=cart-service matched 0 of 0 (complete)",
    )
    assert invalid["status"] == "error"
    assert invalid["error"] is not None
    assert invalid["error"].startswith("invalid arguments for query_deploys: limit: ")


def test_tool_registration_a_backend_without_the_tool_gives_an_error_row(
    deploys_registered: None,
) -> None:
    row = _run(ToolRunner(SampleBackend(environment()), InMemoryLedger()), {})

    assert (row["status"], row["output"]) == ("error", None)
    assert row["error"] == "NotServed: the evidence backend does not serve query_deploys"
    assert row["retrieval_details"] == {"evidence_refs": []}


def test_tool_registration_ends_with_its_block() -> None:
    with registered(DEPLOYS):
        assert spec_of("query_deploys") is DEPLOYS
    runner = ToolRunner(DeployBackend(environment()), InMemoryLedger())

    row = _run(runner, {})

    assert row["status"] == "error"
    assert (row["error"] or "").startswith("unknown tool 'query_deploys'; available tools: ")
    assert "query_deploys" not in _offered()
    assert "query_deploys" not in json_object(display_data()["tools"])


def test_tool_registration_refuses_a_second_tool_of_the_same_name(
    deploys_registered: None,
) -> None:
    with pytest.raises(ValueError, match="registered already"), registered(DEPLOYS):
        pass
    assert spec_of("query_deploys") is DEPLOYS  # the first registration stays


# --------------------------------------------------------------------------- a whole diagnosis


class ToolRecordingModel(RecordingChatModel):
    """A recording scripted model that also keeps the tools it was offered."""

    bound: list[list[str]] = Field(default_factory=list)

    def bind_tools(self, tools: Any, **kwargs: Any) -> ToolRecordingModel:
        self.bound.append([str(tool["function"]["name"]) for tool in tools])
        return self


def _models(replies: dict[str, list[Any]]) -> tuple[GetModel, dict[str, ToolRecordingModel]]:
    counter = iter(range(1, 1_000_000))
    models = {
        role: ToolRecordingModel(
            messages=iter([to_message(r, prefix="call", counter=counter) for r in items]),
            role=role,
            disable_streaming=True,
        )
        for role, items in replies.items()
    }

    def get_model(role: str, ctx: Context) -> BaseChatModel:
        if role not in models:
            raise ScriptExhausted(f"the script has no {role} replies")
        return models[role]

    return get_model, models


def _deploys_replies() -> dict[str, list[Any]]:
    cited = claim(
        "c1",
        "order-service version 2.4.9 was rolled out at 10:09 and set maximumPoolSize 9 -> 5",
        {
            "source_type": "deploy",
            "tool_name": "query_deploys",
            "source_invocation_id": "inv-1",
            "raw_path": "deploys[0]",
            "evidence_excerpt": "version=2.4.9 status=rolled out",
        },
        {
            "source_type": "change",
            "tool_name": "query_deploys",
            "source_invocation_id": "inv-1",
            "raw_path": "deploys[0].changes[1]",
            "evidence_excerpt": "maximumPoolSize 9 -> 5",
        },
    )
    answer = json.dumps(executor_output(cited))
    call = {"tool_calls": [{"name": "query_deploys", "args": {"service": "order-service"}}]}
    return {
        "planner": ["check what order-service deployed"],
        "executor": [call, final(answer)],
        "verifier": [
            verifier_reply("PASS", check("c1", "direct_observation", tool="query_deploys"))
        ],
    }


def test_tool_registration_a_diagnosis_cites_it_and_the_gatekeeper_verifies(
    deploys_registered: None,
) -> None:
    get_model, models = _models(_deploys_replies())
    ledger = InMemoryLedger()
    graph = build_graph(
        get_model=get_model,
        backend=DeployBackend(environment()),
        ledger=ledger,
        audit=InMemoryAuditStore(),
    ).compile(checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "deploys"}}
    question = HumanMessage("Did a deployment change order-service's connection pool?")
    graph.invoke({"messages": [question]}, config=config, context=Context(offline=False))
    state = state_of(graph, config)

    assert "query_deploys" in models["executor"].bound[0]  # the executor's tool list
    planner_system = str(models["planner"].calls[0][0].content)  # and the planner's
    assert (
        "- query_deploys (service, limit): Deployments of the services, newest first, with the "
        "changes each one shipped."
    ) in planner_system.splitlines()
    assert "{tools}" not in planner_system
    gate = state["gatekeeper_result"]
    assert gate["status"] == "pass", gate["errors"]
    verified = gate["verified_excerpts"]["c1"]
    assert [v["raw_path"] for v in verified] == ["deploys[0]", "deploys[0].changes[1]"]
    (item,) = state["trace_summary"]
    assert (item["tool_name"], item["evidence_level"]) == ("query_deploys", "direct")
    assert item["input_summary"] == "service=order-service"
    assert item["output_summary"].startswith(  # each entry on one line, inner arrays left out
        "2026-03-01T10:09:00Z order-service version=2.4.9 status=rolled out; "
        "2026-03-01T10:08:00Z order-service version=2.4.8 status=rolled out; "
    )
    assert state["verdict"] == "PASS"
    assert state["rule_evaluation"]["evidence_calls"] == {"ok": 1, "no_hit": 0, "error": 0}


def test_tool_registration_trace_summary_floor_counts_its_arrays(
    deploys_registered: None,
) -> None:
    row = _run(ToolRunner(DeployBackend(environment()), InMemoryLedger()), {"limit": 3})

    (item,) = build_trace_summary([row], item_chars=40, total_chars=10)

    assert item["output_summary"] == "3 deploys"


# --------------------------------------------------------------------------- replay, offline


def test_tool_registration_a_replay_serves_it(deploys_registered: None) -> None:
    recorded = _run(ToolRunner(DeployBackend(environment()), InMemoryLedger()), {"limit": 2})
    replay = ReplayBackend(
        {
            "services": ["order-service"],
            "calls": [
                {
                    "tool": "query_deploys",
                    "arguments": recorded["arguments"],
                    "status": "ok",
                    "output": recorded["output"],
                    "error": None,
                }
            ],
        }
    )
    runner = ToolRunner(replay, InMemoryLedger())

    again = _run(runner, {"limit": 2, "service": None})
    missing = _run(runner, {"limit": 3}, "c2")

    assert again["output"] == recorded["output"]
    assert again["retrieval_details"] == recorded["retrieval_details"]
    assert (missing["error"] or "").startswith(
        "NotRecorded: the recording has no call query_deploys limit=3"
    )


def test_tool_registration_offline_rules_plan_and_bind_it(deploys_registered: None) -> None:
    plan = '1. query_deploys {"service": "order-service"}\n2. not_a_tool {}'
    result = Result(tool="query_deploys", args={}, invocation_id="inv-1", status="ok", output={})

    assert parse_steps(plan) == [("query_deploys", {"service": "order-service"})]
    assert offline_binding(result, "deploys[0].changes[1]", "x")["source_type"] == "change"
    assert offline_binding(result, "summary", "x")["source_type"] == "summary"


# --------------------------------------------------------------------------- the web page


def test_tool_registration_display_data_carries_it(deploys_registered: None) -> None:
    client = TestClient(Starlette(routes=web_routes()))

    response = client.get("/assets/tools.json")

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert response.json()["tools"]["query_deploys"] == {
        "role": "incident",
        "arrays": [
            {
                "name": "deploys",
                "source_type": "deploy",
                "kind": "table",
                "fields": ["at", "service", "version", "status"],
                "within": [
                    {
                        "name": "changes",
                        "source_type": "change",
                        "kind": "table",
                        "fields": ["file", "summary"],
                    }
                ],
            }
        ],
    }
    assert response.json()["tools"]["query_logs"]["arrays"][0]["kind"] == "log"


def test_tool_registration_the_page_draws_its_entries(
    deploys_registered: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not Path(CHROMIUM).exists() or shutil.which(CHROMIUM) is None:
        component_unavailable("Chromium", f"{CHROMIUM} is missing; apt-get install chromium")
    playwright = pytest.importorskip("playwright.sync_api")
    for name in ("OPENAI_API_KEY", "SUPERBIZ_OFFLINE", "SUPERBIZ_API_KEYS"):
        monkeypatch.delenv(name, raising=False)
    database = f"sqlite:///{tmp_path / 'web.db'}"
    persistence = open_persistence(database, origin="api")
    try:
        get_model, _ = _models(_deploys_replies())
        graph = build_graph(
            get_model=get_model,
            backend=DeployBackend(environment()),
            ledger=persistence.ledger,
            audit=persistence.audit,
            locks=persistence.locks,
        ).compile(checkpointer=persistence.checkpointer)
        thread = f"web-{uuid.uuid4().hex[:12]}"
        assert ThreadOwners(persistence.db).claim(thread, "alice")
        values = run_diagnosis(
            graph,
            thread_id=thread,
            context=Context(offline=False, language="en", composer_mode="template"),
            audit=persistence.audit,
            question="Did a deployment change order-service's connection pool?",
        )
    finally:
        persistence.close()
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(database, api_keys={"key-alice": "alice"}),
            host="127.0.0.1",
            port=port,
            log_level="warning",
        )
    )
    serving = threading.Thread(target=server.run, daemon=True)
    serving.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert serving.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    try:
        assert httpx.get(f"http://127.0.0.1:{port}/assets/tools.json", timeout=10).is_success
        with playwright.sync_playwright() as driver:
            browser = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            try:
                page = browser.new_page()
                errors: list[str] = []
                page.on("pageerror", lambda e: errors.append(str(e)))
                page.goto(
                    f"http://127.0.0.1:{port}/diagnoses/{values['diagnosis_id']}#key=key-alice"
                )
                page.wait_for_selector("body[data-ready=true]")
                rows = page.locator("#entries table.entries tbody tr")
                assert rows.count() == 4  # the four deployments of order-service kept
                cited = page.locator("#entries tr.cited")
                assert cited.count() == 1
                assert cited.get_attribute("data-path") == "deploys[0]"
                assert "2.4.9" in cited.inner_text() and "cited by c1" in cited.inner_text()
                assert page.locator("#logs").count() == 0  # no log array: no timeline
                assert errors == []
            finally:
                browser.close()
    finally:
        server.should_exit = True
        serving.join(30)


# --------------------------------------------------------------------------- JSON-schema arguments

SEARCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "What to look for."},
        "max": {"type": "integer", "minimum": 1, "default": 3},
    },
    "required": ["query"],
    "additionalProperties": False,
}


def _search(call: Call) -> dict[str, Any]:
    """What a remote server's tool would answer: content items."""
    hits = [
        {"type": "text", "text": f"ticket {n} mentions {call.arguments['query']}"} for n in range(5)
    ]
    return {"content": hits[: call.arguments["max"]]}


SEARCH = ToolSpec(
    name="search_tickets",
    description="Search support tickets (a remote server's tool).",
    arguments=SchemaArguments(SEARCH_SCHEMA),
    arrays=(
        EntryArray(
            name="content",
            source_type="text",
            render=lambda item: str(item.get("text")),
            display=Display("document", ("text",)),
        ),
    ),
    ask=_search,
    planned_offline=False,
)


def test_tool_registration_json_schema_arguments_are_validated_and_offered() -> None:
    with registered(SEARCH):
        runner = ToolRunner(SampleBackend(environment()), InMemoryLedger())
        calls = [{"query": "pool"}, {"query": 3}, {"max": 2}, {"query": "x", "extra": 1}]
        rows = [
            runner.run(
                {"name": "search_tickets", "args": args, "id": f"s{i}"},
                diagnosis_id="d1",
                thread_id="t1",
                round=1,
            )
            for i, args in enumerate(calls)
        ]
        offered = _offered()
        plan = parse_steps('1. search_tickets {"query": "pool"}')

    ok, wrong_type, missing, unknown = rows
    assert (ok["status"], ok["arguments"]) == ("ok", {"query": "pool"})  # the default left out
    assert [ref["raw_path"] for ref in ok["retrieval_details"]["evidence_refs"]] == [
        "content[0]",
        "content[1]",
        "content[2]",
        "summary",
    ]  # the default max=3 reached the call
    assert ok["retrieval_details"]["evidence_refs"][0]["text"] == "ticket 0 mentions pool"
    assert (
        wrong_type["error"]
        == "invalid arguments for search_tickets: query: 3 is not of type 'string'"
    )
    assert (
        missing["error"]
        == "invalid arguments for search_tickets: arguments: 'query' is a required property"
    )
    assert (unknown["error"] or "").startswith("invalid arguments for search_tickets: arguments: ")
    assert offered["search_tickets"]["parameters"] == SEARCH_SCHEMA
    assert plan == []  # the offline rules do not plan it


def test_tool_registration_refuses_a_spec_it_cannot_serve() -> None:
    with pytest.raises(ValueError, match="tool name"):
        ToolSpec(name="bad name", description="x", arguments=SchemaArguments({"type": "object"}))
    with pytest.raises(ValueError, match="helper tool"):
        ToolSpec(
            name="helper",
            description="x",
            arguments=SchemaArguments({"type": "object"}),
            role="helper",
            arrays=SEARCH.arrays,
        )
    with pytest.raises(Exception, match="is not valid"):
        SchemaArguments({"type": "object", "properties": {"q": {"type": "no-such-type"}}})


def test_tool_registration_planner_lists_every_offered_tool_on_one_line() -> None:
    long = ToolSpec(
        name="long_story",
        description="Tells the whole story at length. " + "More detail follows here. " * 40,
        arguments=SchemaArguments({"type": "object"}),
        arrays=SEARCH.arrays,
        ask=_search,
        planned_offline=False,
    )
    with registered(SEARCH, long):
        listed = tool_lines(tool_specs()).splitlines()
        every = [str(json_object(spec["function"])["name"]) for spec in tool_specs()]

    assert [line.split(" ", 2)[1] for line in listed] == every  # all of them, in order
    assert {"query_traces", "analyze_incident", "search_tickets"} <= set(every)
    assert (
        "- search_tickets (query, max): Search support tickets (a remote server's tool)." in listed
    )
    assert "- long_story (): Tells the whole story at length." in listed  # the first sentence
    assert all(len(line) <= TOOL_LINE_CHARS for line in listed)
    assert tool_lines([]) == "- (none)"
