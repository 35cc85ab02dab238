"""Run settings are checked by one set of rules at every entry, with the same messages.

Entries: environment variables, command-line options, HTTP API request bodies, and the LangGraph
run context or config. Each wrong value names what set it, the value and what is allowed;
unknown keys are reported with the closest known name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from starlette.testclient import TestClient

import apps.cli.main as cli
from apps.http.api import create_app
from graph.builder import build_graph
from state.context import RULES, Context, check_environment
from state.settings import SettingsError

QUESTION = "order-service 为什么报 500？"
KEYS = {"key-a": "alice"}
ALICE = {"Authorization": "Bearer key-a"}


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for rule in RULES:
        monkeypatch.delenv(rule.variable, raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


@pytest.mark.parametrize(
    ("variable", "value", "allowed"),
    [
        pytest.param("SUPERBIZ_LANGUAGE", "fr", "'zh' or 'en'", id="language"),
        pytest.param(
            "SUPERBIZ_MAX_TOOL_CALLS", "abc", "a whole number of at least 1", id="tool-calls"
        ),
        pytest.param("SUPERBIZ_COMPOSER_MODE", "bad", "'template' or 'model'", id="composer"),
        pytest.param(
            "SUPERBIZ_TOOL_TIMEOUT_S", "-5", "a number of seconds greater than 0", id="timeout"
        ),
        pytest.param("SUPERBIZ_MODEL_TIMEOUT_S", "0", "greater than 0", id="model-timeout"),
        pytest.param("SUPERBIZ_OFFLINE", "maybe", "true or false", id="offline"),
        pytest.param("SUPERBIZ_DIAGNOSIS_DEADLINE_S", "soon", "seconds", id="deadline"),
        pytest.param("SUPERBIZ_MAX_MODEL_CALLS", "0", "at least 1", id="model-calls"),
    ],
)
def test_settings_invalid_environment_variable_is_an_error_naming_it(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    variable: str,
    value: str,
    allowed: str,
) -> None:
    monkeypatch.setenv(variable, value)
    expected = f"{variable} is '{value}': it must be "

    with pytest.raises(SettingsError) as info:
        Context()
    assert expected in str(info.value) and allowed in str(info.value)
    assert check_environment() == [str(info.value)]

    code = cli.main(["diagnose", QUESTION])
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert err.strip().startswith("superbiz: error: ") and expected in err
    assert "Traceback" not in err


def test_settings_every_bad_variable_is_reported_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUPERBIZ_LANGUAGE", "fr")
    monkeypatch.setenv("SUPERBIZ_MAX_TOOL_CALLS", "abc")

    with pytest.raises(SettingsError) as info:
        Context()

    assert len(info.value.problems) == 2


@pytest.mark.parametrize(
    ("values", "fragment"),
    [
        pytest.param(
            {"max_tool_calls_per_round": "lots"},
            "max_tool_calls_per_round is 'lots': it must be a whole number of at least 1",
            id="lots",
        ),
        pytest.param(
            {"max_tool_calls_per_round": True}, "max_tool_calls_per_round is true", id="bool"
        ),
        pytest.param({"tool_timeout_s": 0}, "tool_timeout_s is 0: it must be a number", id="zero"),
        pytest.param({"model_timeout_s": -1.5}, "model_timeout_s is -1.5", id="negative"),
        pytest.param({"language": "fr"}, "language is 'fr': it must be 'zh' or 'en'", id="fr"),
        pytest.param({"offline": "yes"}, "offline is 'yes': it must be true or false", id="flag"),
        pytest.param(
            {"languge": "en"}, "unknown run setting 'languge' (did you mean 'language'?)", id="typo"
        ),
    ],
)
def test_settings_langgraph_context_is_checked_with_the_reason(
    values: dict[str, Any], fragment: str
) -> None:
    graph = build_graph().compile(checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "t-settings"}}

    with pytest.raises(SettingsError) as info:
        graph.invoke({"messages": [HumanMessage(QUESTION)]}, config, context=cast(Any, values))

    assert fragment in str(info.value)
    assert graph.get_state(config).values == {}  # refused before anything ran


def test_settings_langgraph_configurable_settings_are_checked_too() -> None:
    graph = build_graph().compile(checkpointer=InMemorySaver())

    with pytest.raises(SettingsError, match="language is 'fr'"):
        graph.invoke(
            {"messages": [HumanMessage(QUESTION)]},
            {"configurable": {"thread_id": "t-conf", "language": "fr"}},
        )
    values = graph.invoke(
        {"messages": [HumanMessage(QUESTION)]},
        {"configurable": {"thread_id": "t-conf-en", "language": "en"}},
    )
    assert "Conclusion (confirmed facts)" in values["messages"][-1].content


def test_settings_a_valid_context_still_runs() -> None:
    graph = build_graph().compile(checkpointer=InMemorySaver())
    values = graph.invoke(
        {"messages": [HumanMessage(QUESTION)]},
        {"configurable": {"thread_id": "t-ok"}},
        context=cast(Any, {"language": "en", "max_tool_calls_per_round": 3, "tool_timeout_s": 2}),
    )
    assert values["verdict"] == "PASS"


def _api(tmp_path: Path) -> TestClient:
    return TestClient(create_app(f"sqlite:///{tmp_path / 'api.sqlite'}", api_keys=KEYS))


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        pytest.param(
            {"question": "q", "settings": {"max_tool_calls_per_round": "lots"}},
            "max_tool_calls_per_round is 'lots': it must be a whole number of at least 1",
            id="lots",
        ),
        pytest.param(
            {"question": "q", "settings": {"languge": "en"}},
            "unknown run setting 'languge' (did you mean 'language'?)",
            id="typo",
        ),
        pytest.param(
            {"question": "q", "settings": {"model": "gpt-5"}},
            "model cannot be set here; it is configured with SUPERBIZ_MODEL",
            id="server-setting",
        ),
        pytest.param(
            {"question": "q", "langauge": "en"}, "unknown field 'langauge'", id="unknown-field"
        ),
        pytest.param({"question": "q", "settings": [1]}, "settings must be an object", id="list"),
    ],
)
def test_settings_api_body_is_checked_with_the_same_rules(
    tmp_path: Path, body: dict[str, Any], fragment: str
) -> None:
    with _api(tmp_path) as client:
        response = client.post("/api/chat", json=body, headers=ALICE)

    assert response.status_code == 422
    assert fragment in response.json()["error"]


def test_settings_api_body_settings_select_the_run(tmp_path: Path) -> None:
    with _api(tmp_path) as client:
        response = client.post(
            "/api/chat",
            json={"question": QUESTION, "settings": {"language": "en", "composer_mode": "model"}},
            headers=ALICE,
        )

    assert response.status_code == 200
    assert "Conclusion (confirmed facts)" in response.json()["answer"]


def test_settings_the_same_value_gets_the_same_message_at_every_entry(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    tail = "is 'fr': it must be 'zh' or 'en'"
    messages: list[str] = []

    cli.main(["diagnose", QUESTION, "--lang", "fr"])
    messages.append(capsys.readouterr().err)
    with _api(tmp_path) as client:
        response = client.post("/api/chat", json={"question": "q", "language": "fr"}, headers=ALICE)
        messages.append(response.json()["error"])
    with pytest.raises(SettingsError) as info:
        Context(language="fr")
    messages.append(str(info.value))
    monkeypatch.setenv("SUPERBIZ_LANGUAGE", "fr")
    with pytest.raises(SettingsError) as info:
        Context()
    messages.append(str(info.value))

    labels = ["--lang", "language", "language", "SUPERBIZ_LANGUAGE"]
    for label, message in zip(labels, messages, strict=True):
        assert f"{label} {tail}" in message
