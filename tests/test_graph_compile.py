"""The graph is compiled in one place, as LangGraph's own class, and guards every run itself.

``graph/compile.py`` is the only product module that compiles a graph; no product class subclasses
LangGraph's graph classes; the run guard (``graph/guard.py``) rides on the compiled graph as a
callback handler and holds on every way of running it: ``invoke`` and ``stream``, their async
forms, the event streams the LangGraph server uses, and a copy given another checkpointer (what
the server does). The entry points' own tests drive it through the command line, the HTTP API
and ``langgraph dev``.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import inspect
import pkgutil
import threading
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.constants import TAG_HIDDEN
from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.pregel import Pregel

from graph.builder import INTERNAL_NODES, NODES
from graph.compile import RunStores, compile_graph
from graph.guard import RESUMED_NOTE, cancelled_note, interrupted_note
from graph.runner import Graph
from models.factory import make_model_factory
from persistence.locks import ThreadBusy
from state.context import Context
from state.graph_state import InputState

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = (
    "analysis",
    "apps",
    "evidence",
    "graph",
    "knowledge",
    "models",
    "nodes",
    "persistence",
    "state",
    "tools",
    "verification",
)
QUESTION = "order-service 为什么报 500？"
OFFLINE = Context(offline=True)
BOUND_S = 60.0


# --------------------------------------------------------------------------- one compile site


def _compile_calls(path: Path) -> list[int]:
    """Lines of ``<something>.compile(...)`` calls, ``re.compile`` aside."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "compile"
            and not (isinstance(node.func.value, ast.Name) and node.func.value.id == "re")
        ):
            found.append(node.lineno)
    return found


def test_compile_graph_is_the_one_product_module_that_compiles_a_graph() -> None:
    sites = {
        f"{path.relative_to(ROOT)}:{line}"
        for package in PRODUCT
        for path in sorted((ROOT / package).rglob("*.py"))
        for line in _compile_calls(path)
    }

    assert [site.split(":")[0] for site in sites] == ["graph/compile.py"], sorted(sites)


def test_compile_calls_scan_finds_a_compile_and_ignores_regular_expressions(
    tmp_path: Path,
) -> None:
    source = tmp_path / "wiring.py"
    source.write_text(
        "import re\nPATTERN = re.compile('x')\napp = build_graph().compile(checkpointer=None)\n",
        encoding="utf-8",
    )

    assert _compile_calls(source) == [3]


# --------------------------------------------------------------------------- no subclasses


def _product_modules() -> Iterator[str]:
    for package in PRODUCT:
        yield package
        path = [str(ROOT / package)]
        for info in pkgutil.walk_packages(path, prefix=f"{package}."):
            if info.name.endswith(".__main__"):  # runs the command when imported
                continue
            if info.name.startswith("persistence.migrations."):  # Alembic's scripts, run by it
                continue
            yield info.name


LANGGRAPH_GRAPHS = (StateGraph, CompiledStateGraph, Pregel)


def test_no_product_class_subclasses_langgraph_graph_classes() -> None:
    classes = [
        cls
        for name in _product_modules()
        for _, cls in inspect.getmembers(importlib.import_module(name), inspect.isclass)
        if cls.__module__ == name
    ]
    subclasses = sorted(
        f"{cls.__module__}.{cls.__qualname__}"
        for cls in classes
        if issubclass(cls, LANGGRAPH_GRAPHS)
    )

    assert len(classes) > 100  # the walk reached the product, not an empty folder
    assert subclasses == []


def test_compiled_graph_is_langgraph_s_own_class_with_internal_nodes_hidden() -> None:
    app = compile_graph(RunStores(InMemorySaver()))

    assert type(app) is CompiledStateGraph
    hidden = {name for name in NODES if TAG_HIDDEN in (app.nodes[name].tags or [])}
    assert hidden == set(INTERNAL_NODES)


# --------------------------------------------------------------------------- the run guard


def _question() -> InputState:
    return InputState(messages=[HumanMessage(QUESTION)])


def _config(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread}}


def _exploding(role: str, ctx: Context) -> BaseChatModel:
    raise SystemError("model endpoint exploded")


class _StopAtPlanner:
    """A model factory whose planner raises ``error`` (Ctrl-C, say) while the rest works."""

    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.models = make_model_factory()

    def __call__(self, role: str, ctx: Context) -> BaseChatModel:
        if role == "planner":
            raise self.error
        return self.models(role, ctx)


def _free(stores: RunStores, thread: str) -> bool:
    """Whether the thread's lock is free and no lease of it is held any more."""
    try:
        with stores.locks.hold(thread):
            pass
    except ThreadBusy:
        return False
    return stores.locks.current(thread) is None


def _only_record(stores: RunStores, thread: str) -> dict[str, Any]:
    [record] = stores.audit.list(thread)
    return dict(record)


def _drain_events(app: Graph, payload: InputState | None, config: RunnableConfig) -> None:
    """Run the graph through ``astream_events``, as the LangGraph server's event streams do."""

    async def run() -> None:
        async for _ in app.astream_events(payload, config, context=OFFLINE, version="v2"):
            pass

    asyncio.run(asyncio.wait_for(run(), BOUND_S))


@pytest.mark.parametrize("way", ["invoke", "ainvoke", "astream_events"])
def test_guard_refuses_a_run_on_a_busy_thread_before_any_node_runs(way: str) -> None:
    saver = InMemorySaver()
    stores = RunStores(saver)
    app = compile_graph(stores)
    config = _config("t-busy")

    with stores.locks.hold("t-busy"), pytest.raises(ThreadBusy):
        if way == "invoke":
            app.invoke(_question(), config, context=OFFLINE)
        elif way == "ainvoke":
            asyncio.run(app.ainvoke(_question(), config, context=OFFLINE))
        else:
            _drain_events(app, _question(), config)

    assert saver.get_tuple(config) is None
    assert stores.audit.list("t-busy") == []
    assert _free(stores, "t-busy")


def _as_served(saver: InMemorySaver, stores: RunStores, **kwargs: Any) -> Graph:
    """The graph as the LangGraph server holds it: compiled without a checkpointer, reading its
    threads through one of its own on the same data, given the server's by ``copy``."""
    app = compile_graph(stores, checkpoints=lambda: nullcontext(saver), **kwargs)
    assert app.checkpointer is None
    return app.copy(update={"checkpointer": saver})


@pytest.mark.parametrize("way", ["invoke", "astream_events", "server-copy"])
def test_guard_records_a_failed_run_and_gives_the_thread_back(way: str) -> None:
    saver = InMemorySaver()
    if way == "server-copy":
        stores = RunStores()
        app = _as_served(saver, stores, get_model=_exploding)
    else:
        stores = RunStores(saver)
        app = compile_graph(stores, get_model=_exploding)
    config = _config("t-fail")
    english = Context(offline=True, language="en")

    with pytest.raises(SystemError, match="model endpoint exploded"):
        if way in ("invoke", "server-copy"):
            app.invoke(_question(), config, context=english)
        else:

            async def run() -> None:
                async for _ in app.astream_events(
                    _question(), config, context=english, version="v2"
                ):
                    pass

            asyncio.run(run())

    record = _only_record(stores, "t-fail")
    assert record["status"] == "failed"
    assert record["note"] == "failed: SystemError: model endpoint exploded"
    assert "could not finish" in str(record["final_answer"])  # in the run's language
    channels = record["self_evaluation"]
    assert channels["failure"]["route"] == ["intake"]  # the state the failed run left
    assert channels["usage"]["budgets"]["max_tool_calls_per_round"] == 8  # its settings
    assert _free(stores, "t-fail")


def test_guard_notes_ctrl_c_and_leaves_the_diagnosis_resumable() -> None:
    stores = RunStores(InMemorySaver())
    app = compile_graph(stores, get_model=_StopAtPlanner(KeyboardInterrupt()))

    with pytest.raises(KeyboardInterrupt):
        app.invoke(_question(), _config("t-int"), context=OFFLINE)

    record = _only_record(stores, "t-int")
    assert (record["status"], record["note"]) == ("running", interrupted_note("t-int"))
    assert _free(stores, "t-int")


def test_guard_fails_a_cancelled_async_run_and_gives_the_thread_back() -> None:
    stores = RunStores(InMemorySaver())
    entered, gate = threading.Event(), threading.Event()
    models = make_model_factory()

    def held(role: str, ctx: Context) -> BaseChatModel:
        if role == "planner":
            entered.set()
            gate.wait(BOUND_S)
        return models(role, ctx)

    app = compile_graph(stores, get_model=held)

    async def cancel_mid_run() -> None:
        async def consume() -> None:
            async for _ in app.astream(_question(), _config("t-cancel"), context=OFFLINE):
                pass

        task = asyncio.create_task(consume())
        await asyncio.to_thread(entered.wait, BOUND_S)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        gate.set()

    try:
        asyncio.run(asyncio.wait_for(cancel_mid_run(), BOUND_S))
    finally:
        gate.set()
    record = _only_record(stores, "t-cancel")
    assert (record["status"], record["note"]) == ("failed", cancelled_note("t-cancel"))
    assert _free(stores, "t-cancel")


@pytest.mark.parametrize("way", ["invoke", "astream_events", "server-copy"])
def test_guard_leases_and_notes_a_resumed_diagnosis(way: str) -> None:
    saver = InMemorySaver()
    if way == "server-copy":
        stores = RunStores()
        app = _as_served(saver, stores)
    else:
        stores = RunStores(saver)
        app = compile_graph(stores)
    config = _config("t-resume")
    for _ in app.stream(_question(), config, context=OFFLINE, interrupt_after=["planner"]):
        pass

    if way == "astream_events":
        _drain_events(app, None, config)
    else:
        app.invoke(None, config, context=OFFLINE)

    record = _only_record(stores, "t-resume")
    assert (record["status"], record["note"]) == ("done", RESUMED_NOTE)
    assert record["verdict"] == "PASS"
    assert _free(stores, "t-resume")


def test_guard_leases_the_resumed_diagnosis_while_it_runs() -> None:
    stores = RunStores(InMemorySaver())
    seen: list[str | None] = []
    models = make_model_factory()

    def watching(role: str, ctx: Context) -> BaseChatModel:
        if role == "executor":
            seen.append(stores.locks.current("t-lease"))
        return models(role, ctx)

    app = compile_graph(stores, get_model=watching)
    config = _config("t-lease")
    for _ in app.stream(_question(), config, context=OFFLINE, interrupt_after=["planner"]):
        pass
    diagnosis_id = app.get_state(config).values["diagnosis_id"]
    stores.locks.release("t-lease")  # as a new process would start: no lease held
    seen.clear()

    app.invoke(None, config, context=OFFLINE)

    assert seen and set(seen) == {diagnosis_id}
    assert _free(stores, "t-lease")


def test_guard_lets_a_run_without_a_thread_run_unguarded() -> None:
    stores = RunStores()
    app = compile_graph(stores)

    values = app.invoke(_question(), context=OFFLINE)

    assert values["verdict"] == "PASS"
