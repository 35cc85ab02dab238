"""Hostile inputs that scenario files cannot express: a lying composer across the whole corpus,
an oversized claim list, unstorable characters through the HTTP API and the databases, and a
re-check that would loosen a recorded verdict.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

import apps.cli.main as cli
from apps.eval.evaluation import run_graph, run_scenario
from apps.eval.scenario import Scenario, load_scenario
from apps.http.api import create_app
from tests.records import binding
from tests.records import claim as claim_of
from tests.scenario_kit import (
    ERROR_LOGS_CALL,
    LOG_500_A,
    check,
    environment,
    executor_answer,
    final,
    run_diagnosis,
    verifier_reply,
)


def claim(claim_id: str, text: str, excerpt: str) -> dict[str, Any]:
    """A claim bound to the first ERROR log line of the kit's environment."""
    return claim_of(claim_id, text, binding("inv-1", "logs[0]", excerpt))


CORPUS = sorted((Path(__file__).parent / "scenarios").glob("*.json"))

INVENTED = {
    "cause": "{claim} because a database migration locked the orders table.",
    "entity": "{claim}, and inventory-service is down as well.",
    "number-in-words": "{claim} about thirty times.",
    "extra-sentence": "{claim}. The database is overloaded.",
    "zh-cause": "{claim}，原因是订单库主从切换导致连接中断。",
}


def _confirmed_scenarios() -> list[tuple[Path, Scenario, list[str]]]:
    found = []
    for path in CORPUS:
        scenario = load_scenario(path)
        result = run_scenario(scenario)
        if result["confirmed_claims"] and result["ok"]:
            found.append((path, scenario, result["confirmed_claims"]))
    return found


CONFIRMED = _confirmed_scenarios()


@pytest.mark.parametrize("kind", sorted(INVENTED))
@pytest.mark.parametrize(
    ("path", "scenario", "confirmed"), CONFIRMED, ids=[p.stem for p, _, _ in CONFIRMED]
)
def test_adversarial_composer_never_adds_to_a_confirmed_claim(
    path: Path, scenario: Scenario, confirmed: list[str], kind: str
) -> None:
    """A summary citing one confirmed claim and adding anything of its own falls back."""
    state = run_graph(scenario)
    texts = {c["claim_id"]: c["claim_text"] for c in state["executor_answer"]["claims"]}
    cited = confirmed[0]
    summary = INVENTED[kind].format(claim=texts[cited].rstrip("。."))
    hostile = copy.deepcopy(scenario)
    hostile["script"]["composer"] = {"summary": summary, "summary_claim_ids": [cited]}

    hostile_state = run_graph(hostile)

    output = hostile_state["composer_output"]
    assert output["mode"] == "fallback", output
    assert output.get("violations")
    assert summary not in hostile_state["answer"]


@pytest.mark.parametrize(
    "reply",
    ["[" * 1000, '{"summary": ' * 1000, "[" * 300 + "]" * 300],
    ids=["unmatched-brackets", "deep-objects", "deep-balanced"],
)
def test_adversarial_deeply_nested_composer_reply_falls_back(reply: str) -> None:
    """A composer reply nested a thousand levels deep is unreadable: template, not a crash."""
    scenario = load_scenario(
        Path(__file__).parent / "scenarios" / "composer-model-accepted-en.json"
    )
    hostile = copy.deepcopy(scenario)
    hostile["script"]["composer"] = reply

    state = run_graph(hostile)

    assert state["composer_output"]["mode"] == "fallback"
    assert state["verdict"] == "PASS"
    assert reply[:50] not in state["answer"]


def test_adversarial_faithful_summaries_in_the_corpus_are_still_accepted() -> None:
    accepted = load_scenario(
        Path(__file__).parent / "scenarios" / "composer-model-accepted-en.json"
    )
    state = run_graph(accepted)
    assert state["composer_output"]["mode"] == "model"


def test_adversarial_claims_left_out_of_the_verifier_input_are_not_checked() -> None:
    tags = [f"{a}{b}" for a in "abcdefgh" for b in "abcdefgh"][:60]
    claims = [
        claim(f"c{n}", f"order-service logged HTTP 500 errors, batch {tag}", "HTTP 500")
        for n, tag in enumerate(tags, start=1)
    ]
    checks = [check(f"c{n}", "direct_observation") for n in range(1, 61)]
    run = run_diagnosis(
        environment(),
        {
            "planner": ["check the logs"],
            "executor": [ERROR_LOGS_CALL, final(executor_answer(*claims))],
            "verifier": [verifier_reply("PASS", *checks)],
        },
    )

    result = run.state["verifier_result"]
    assert 0 < len(result["unchecked"]) < 60
    labels = {c["claim_id"]: c["verification"] for c in result["claim_checks"]}
    assert all(labels[claim_id] == "unsupported" for claim_id in result["unchecked"])
    assert run.state["verdict"] != "PASS"
    last = int(result["unchecked"][-1][1:])
    assert f"batch {tags[last - 1]} (not checked" in run.state["answer"]


# --------------------------------------------------------------------------- unstorable text


@pytest.mark.parametrize("bad", ["\x00", "\ud800"], ids=["nul", "lone-surrogate"])
def test_adversarial_api_refuses_an_unstorable_question(
    database_url: str, bad: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    body = json.dumps({"question": f"order-service {bad} failing?"}, ensure_ascii=True)
    with TestClient(create_app(database_url, api_keys={}), base_url="http://127.0.0.1") as client:
        response = client.post(
            "/api/chat", content=body, headers={"Content-Type": "application/json"}
        )
        threads = client.get("/api/threads").json()["threads"]
    assert response.status_code == 422
    assert "NUL character or a lone UTF-16 surrogate" in response.json()["error"]
    assert threads == []  # nothing half-written: no orphan thread


def test_adversarial_unstorable_log_text_is_recorded_not_a_crash(
    database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = [
        {
            "timestamp": "2026-03-01T10:01:00Z",
            "level": "ERROR",
            "service": "order-service",
            "instance": "order-1",
            "message": f"{LOG_500_A} \x00 \ud800 trailing",
        }
    ]
    env_file = tmp_path / "env.json"
    env_file.write_text(json.dumps({"logs": logs}, ensure_ascii=True), encoding="utf-8")

    code = cli.main(
        [
            "diagnose",
            "order-service 为什么报 500 错误？",
            "--offline",
            "--json",
            "--env",
            str(env_file),
            "--db",
            database_url,
        ]
    )

    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["verdict"] in ("PASS", "LOW_CONFID", "REJECT")
    assert cli.main(["sessions", "show", result["diagnosis_id"], "--db", database_url]) == 0
    assert "\ufffd" in capsys.readouterr().out


# --------------------------------------------------------------------------- reverify


def test_adversarial_offline_reverify_never_loosens_a_verdict_silently(
    database_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scripted Verifier rejected a claim the offline checker would pass: the re-check is
    capped at LOW_CONFID and says it is looser than the recorded REJECT."""
    from evidence.sample import SampleBackend
    from graph.compile import compile_graph
    from graph.runner import run_diagnosis as run_graph_on
    from models.scripted import scripted_models
    from persistence.store import open_persistence
    from state.context import Context

    claim_c1 = claim(
        "c1", "order-service logged HTTP 500 Cannot acquire connection from pool", "HTTP 500"
    )
    replies: dict[str, list[Any]] = {
        "planner": ["check the logs"],
        "executor": [ERROR_LOGS_CALL, final(executor_answer(claim_c1))],
        "verifier": [verifier_reply("REJECT", check("c1", "contradicted"), score=0.0)],
    }
    persistence = open_persistence(database_url)
    try:
        app = compile_graph(
            persistence, SampleBackend(environment()), get_model=scripted_models(replies)
        )
        values = run_graph_on(
            app,
            thread_id="t-reverify",
            context=Context(offline=False),
            audit=persistence.audit,
            question="Is order-service returning HTTP 500?",
        )
    finally:
        persistence.close()
    assert values["verdict"] == "REJECT"
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)

    assert (
        cli.main(["reverify", values["diagnosis_id"], "--offline", "--json", "--db", database_url])
        == 0
    )

    report = json.loads(capsys.readouterr().out)
    assert report["after"]["verdict"] == "LOW_CONFID"
    assert report["loosened"] is True
    assert "LOOSER" in report["changes"][0]
