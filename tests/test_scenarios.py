"""The scenario corpus (tests/scenarios) and the scenario runner of contracts section 9."""

from __future__ import annotations

import copy
import functools
import io
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import pytest
from pydantic import TypeAdapter

from apps.eval import evaluation
from apps.eval.evaluation import (
    Checkpointer,
    ScenarioResult,
    eval_command,
    run_graph,
    run_paths,
    run_scenario,
    summarize,
)
from apps.eval.scenario import Expect, Scenario, ScenarioError, load_scenario, validate_scenario
from state.records import GatekeeperBrief, JSONObject, JSONValue, RuleId
from tests.records import json_list, json_object

SCENARIOS = Path(__file__).parent / "scenarios"
FILES = sorted(SCENARIOS.glob("*.json"))
RESULT_KEYS = {
    "id",
    "ok",
    "verdict",
    "model_verdict",
    "rounds",
    "route",
    "gatekeeper",
    "groundedness_score",
    "root_cause_service",
    "confirmed_claims",
    "question_coverage",
    "answer",
    "mismatches",
    "error",
}


def _scenario_id(path: Path) -> str:
    return str(json.loads(path.read_text(encoding="utf-8"))["id"])


@functools.cache
def _result(path: Path) -> ScenarioResult:
    return run_scenario(load_scenario(path))


def _corpus() -> tuple[list[ScenarioResult], list[Scenario]]:
    scenarios = [load_scenario(path) for path in FILES]
    return [_result(path) for path in FILES], scenarios


def _scenario(name: str) -> Scenario:
    """A fresh copy of a corpus scenario, for a test to change."""
    return copy.deepcopy(load_scenario(SCENARIOS / f"{name}.json"))


def _scenario_json(name: str) -> JSONObject:
    """A corpus scenario file as the JSON it holds, for a test to break."""
    return json_object(json.loads((SCENARIOS / f"{name}.json").read_text(encoding="utf-8")))


def _load_error(tmp_path: Path, change: Callable[[JSONObject], object]) -> tuple[Path, str]:
    """Break a copy of a corpus scenario file with ``change`` and load it: the file, the error."""
    data = _scenario_json("pass-basic-zh")
    change(data)
    path = _write(tmp_path, "broken.json", data)
    with pytest.raises(ScenarioError) as raised:
        load_scenario(path)
    return path, str(raised.value)


def _error(result: ScenarioResult) -> str:
    """Why a scenario could not run (it must have failed)."""
    assert result["error"] is not None, result
    return result["error"]


def _write(folder: Path, name: str, data: object) -> Path:
    path = folder / name
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=True)
    path.write_text(text, encoding="utf-8")
    return path


def _final_claims(scenario: Scenario) -> list[JSONObject]:
    """The claims of the last executor answer of the script (when it is readable JSON)."""
    content: JSONValue = scenario["script"]["rounds"][-1]["executor"][-1].get("content")
    if isinstance(content, str):
        body = re.sub(r"^```[a-z]*\n|\n```$", "", content.strip())
        try:
            content = json.loads(body)
        except (json.JSONDecodeError, RecursionError):
            return []
    claims = content.get("claims") if isinstance(content, dict) else None
    return [c for c in claims if isinstance(c, dict)] if isinstance(claims, list) else []


# --------------------------------------------------------------------------- the corpus


@pytest.mark.parametrize("path", FILES, ids=[_scenario_id(p) for p in FILES])
def test_scenario_meets_its_expectations(path: Path, checkpointer: Checkpointer) -> None:
    result = run_scenario(load_scenario(path), checkpointer=checkpointer)

    assert result["ok"], f"{result['id']}: " + "; ".join(result["mismatches"])
    assert checkpointer.get_tuple({"configurable": {"thread_id": f"eval-{result['id']}"}})


def test_corpus_has_forty_scenarios_in_both_languages() -> None:
    scenarios = [load_scenario(path) for path in FILES]
    languages = {scenario["language"] for scenario in scenarios}

    assert len(scenarios) >= 40
    assert languages == {"zh", "en"}
    assert len({scenario["id"] for scenario in scenarios}) == len(scenarios)


def test_corpus_has_no_leaks() -> None:
    results, scenarios = _corpus()
    leaking = [
        result["id"]
        for result, scenario in zip(results, scenarios, strict=True)
        if any(
            text in result["answer"] for text in scenario["expect"].get("answer_not_contains", [])
        )
    ]

    assert summarize(results, scenarios)["leak_count"] == 0, f"leaks in {leaking}"


def test_corpus_unbound_specifics_has_no_false_positive_on_grounded_answers() -> None:
    results, scenarios = _corpus()
    flagged = [
        result["id"]
        for result, scenario in zip(results, scenarios, strict=True)
        if scenario["expect"].get("verdict") == "PASS"
        and "evidence.unbound_specifics" in result["gatekeeper"]["failed_rules"]
    ]
    grounded = [s for s in scenarios if s["expect"].get("verdict") == "PASS"]

    assert len(grounded) >= 10
    assert summarize(results, scenarios)["unbound_specifics_false_positives"] == 0, flagged


def test_corpus_guards_every_claim_it_does_not_confirm() -> None:
    unguarded = []
    for path in FILES:
        scenario = load_scenario(path)
        expect = scenario["expect"]
        confirmed = set(expect.get("confirmed_claims", []))
        guards = expect.get("answer_not_contains", [])
        for claim in _final_claims(scenario):
            if claim.get("claim_id") not in confirmed and not any(
                str(claim.get("claim_text")) in guard for guard in guards
            ):
                unguarded.append(f"{scenario['id']}:{claim.get('claim_id')}")

    assert unguarded == []


def test_corpus_fenced_output_is_valid_and_recorded() -> None:
    state = run_graph(_scenario("parse-fenced-output-zh"))

    assert state["parse_status"]["status"] == "valid"
    assert state["parse_status"]["fence_stripped"] is True


def test_corpus_deduped_knowledge_is_no_new_evidence() -> None:
    state = run_graph(_scenario("knowledge-deduped-zh"))
    knowledge = [i for i in state["trace_summary"] if i["tool_name"] == "lookup_knowledge"]

    assert [item["evidence_level"] for item in knowledge] == ["direct", "none"]
    assert "deduped" in knowledge[1]["output_summary"]


def test_corpus_composer_reply_is_used_only_when_it_passes_the_check() -> None:
    accepted = run_graph(_scenario("composer-model-accepted-en"))
    refused = run_graph(_scenario("composer-model-promotes-unsupported-zh"))

    assert accepted["composer_output"]["mode"] == "model"
    assert refused["composer_output"]["mode"] == "fallback"
    assert any("c2" in problem for problem in refused["composer_output"]["violations"])


def test_corpus_unreadable_verifier_replies_fall_back_to_the_claim_checker() -> None:
    state = run_graph(_scenario("verifier-malformed-three-times-fallback-zh"))
    result = state["verifier_result"]

    assert result["verifier_mode"] == "fallback"
    assert result["reply_parse"]["repair_attempts"] == 2
    assert result["derived_verdict"] == "PASS"
    assert result["verdict"] == "LOW_CONFID"


def test_corpus_tool_error_stays_in_the_trace_as_a_gap() -> None:
    state = run_graph(_scenario("tool-error-kept-as-gap-en"))
    first = state["trace_summary"][0]

    assert first["trace_ref"] == "t1"
    assert first["success"] is False
    assert first["evidence_level"] == "none"
    assert "start" in first["output_summary"]


# --------------------------------------------------------------------------- loading


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda s: s.update(language="fr"), "'language' must be 'zh' or 'en'"),
        (lambda s: s["expect"].update(verdikt="PASS"), "expect has unknown key(s) verdikt"),
        (lambda s: s["script"].update(rounds=[]), "script.rounds must be an array of one or two"),
        (lambda s: s["environment"]["logs"][0].pop("timestamp"), "missing required field"),
        (lambda s: s["script"]["rounds"][0].pop("verifier"), "is missing 'verifier'"),
        (lambda s: s["expect"].update(verdict="OK"), "expect.verdict must be one of"),
        (lambda s: s.pop("id"), "'id' must be a non-empty string"),
    ],
    ids=["language", "expect-key", "no-rounds", "environment", "no-verifier", "verdict", "no-id"],
)
def test_load_scenario_names_the_file_and_the_problem(
    tmp_path: Path, change: Callable[[JSONObject], object], reason: str
) -> None:
    path, message = _load_error(tmp_path, change)

    assert str(path) in message
    assert reason in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda s: s["script"]["rounds"][0]["executor"][0]["tool_calls"][0].pop("name"),
            "script.rounds[0].executor[0].tool_calls[0].name must be a tool name",
        ),
        (
            lambda s: s["script"]["rounds"][0].update(verifer="x"),
            "script.rounds[0] has unknown key(s) verifer; allowed: planner, executor, verifier",
        ),
        (
            lambda s: s["script"]["rounds"][0]["executor"].insert(1, {}),
            "script.rounds[0].executor[1] needs 'tool_calls' or 'content'",
        ),
        (
            lambda s: s["script"]["rounds"][0].update(verifier=["{}", 3]),
            "script.rounds[0].verifier[1] must be a string or a JSON object, got a number",
        ),
        (
            lambda s: s["environment"]["logs"][1].update(timestamp="noon"),
            "environment.logs[1].timestamp: 'noon' is not an ISO-8601 timestamp",
        ),
        (
            lambda s: s["environment"]["logs"][0].update(level=3),
            "environment.logs[0].level must be a string, got a number",
        ),
        (lambda s: s["expect"].update(rounds=True), "expect.rounds must be 1 or 2"),
        (
            lambda s: s["expect"].update(verdict=None),
            "expect.verdict must not be null; leave the key out instead",
        ),
        (
            lambda s: s.update(question="Is order-service \ud83d failing?"),
            "question holds a lone UTF-16 surrogate or a NUL character (at character 17)",
        ),
    ],
    ids=[
        "tool-name",
        "round-key",
        "empty-step",
        "verifier-attempt",
        "timestamp",
        "type",
        "bool",
        "null",
        "lone-surrogate-in-question",
    ],
)
def test_load_scenario_names_the_field_by_its_path(
    tmp_path: Path, change: Callable[[JSONObject], object], message: str
) -> None:
    path, error = _load_error(tmp_path, change)

    assert error.startswith(f"{path}: {message}")


def test_load_scenario_gives_a_record_of_the_file() -> None:
    record = TypeAdapter(Scenario)
    for path in FILES:
        scenario = load_scenario(path)

        assert record.validate_python(scenario, strict=True) == scenario
        assert validate_scenario(scenario, origin=str(path)) == scenario


def test_load_scenario_holds_every_verifier_reply_in_a_list(tmp_path: Path) -> None:
    data = _scenario_json("pass-basic-zh")
    data.pop("expect")
    reply = json_object(json_list(json_object(data["script"])["rounds"])[0])["verifier"]

    scenario = load_scenario(_write(tmp_path, "one.json", data))

    assert not isinstance(reply, list)
    assert scenario["script"]["rounds"][0]["verifier"] == [reply]
    assert scenario["expect"] == {}


def test_load_scenario_rejects_text_that_is_not_json(tmp_path: Path) -> None:
    path = _write(tmp_path, "cut.json", '{"id": "cut", ')

    with pytest.raises(ScenarioError, match="not valid JSON"):
        load_scenario(path)


# --------------------------------------------------------------------------- running


def test_run_paths_reports_malformed_files_and_runs_the_others(tmp_path: Path) -> None:
    _write(tmp_path, "a-good.json", _scenario("pass-basic-zh"))
    _write(tmp_path, "b-cut.json", '{"id": ')
    wrong = _scenario_json("pass-basic-zh")
    wrong["id"] = "wrong-language"
    wrong["language"] = "de"
    (tmp_path / "nested").mkdir()
    _write(tmp_path / "nested", "c-language.json", wrong)

    results = run_paths([str(tmp_path)])

    assert [r["ok"] for r in results] == [True, False, False]
    assert results[0]["id"] == "pass-basic-zh"
    assert "b-cut.json" in _error(results[1]) and "not valid JSON" in _error(results[1])
    assert "c-language.json" in _error(results[2]) and "'language'" in _error(results[2])
    assert all(set(r) == RESULT_KEYS for r in results)


def test_run_scenario_reports_a_script_that_runs_out_of_replies() -> None:
    scenario = _scenario("pass-basic-zh")
    scenario["script"]["rounds"][0]["executor"].pop()

    result = run_scenario(scenario)

    assert result["ok"] is False
    assert result["mismatches"] == ["script ran out of executor replies"]
    assert "executor" in _error(result)
    assert result["route"][:4] == ["intake", "planner", "executor", "tools"]


def test_run_scenario_reports_a_missing_retry_round_as_a_scenario_error() -> None:
    scenario = _scenario("retry-rescued-to-pass-en")
    scenario["script"]["rounds"].pop()

    result = run_scenario(scenario)

    assert result["ok"] is False
    assert result["mismatches"] == ["script ran out of planner replies"]


def test_run_scenario_reports_replies_the_run_never_used() -> None:
    scenario = _scenario("pass-basic-zh")
    scenario["script"]["rounds"].append(copy.deepcopy(scenario["script"]["rounds"][0]))

    result = run_scenario(scenario)

    assert result["ok"] is False
    assert "script has 1 unused planner reply" in result["mismatches"]
    assert "script has 2 unused executor replies" in result["mismatches"]


def test_run_scenario_wrong_expectation_gives_a_readable_mismatch() -> None:
    scenario = _scenario("pass-basic-zh")
    scenario["expect"].update(
        {
            "verdict": "REJECT",
            "groundedness_score": 0.5,
            "confirmed_claims": ["c1", "c9"],
            "answer_contains": ["root cause: bad deploy"],
        }
    )

    result = run_scenario(scenario)

    assert result["ok"] is False
    assert result["verdict"] == "PASS"
    assert result["mismatches"] == [
        "verdict: expected REJECT got PASS",
        "confirmed_claims: expected [c1, c9] got [c1]",
        "groundedness_score: expected 0.5 got 1.0",
        "answer does not contain 'root cause: bad deploy'",
    ]


def test_run_scenario_reports_an_exception_instead_of_raising(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*args: object, **kwargs: object) -> NoReturn:
        raise RuntimeError("backend exploded")

    monkeypatch.setattr(evaluation, "compile_graph", broken)

    result = run_scenario(_scenario("pass-basic-zh"))

    assert result["ok"] is False
    assert result["error"] == "RuntimeError: backend exploded"
    assert result["mismatches"] == ["run failed: RuntimeError: backend exploded"]


def _expecting(scenario_id: str, expect: Expect) -> Scenario:
    """A corpus scenario under another id, with other expectations (all ``summarize`` reads)."""
    return {**_scenario("pass-basic-zh"), "id": scenario_id, "expect": expect}


def _outcome(
    scenario_id: str,
    *,
    ok: bool,
    verdict: str,
    rounds: int = 1,
    route: list[str] | None = None,
    answer: str = "",
    failed_rules: list[RuleId] | None = None,
) -> ScenarioResult:
    """A scenario result with what ``summarize`` reads; the rest empty."""
    return ScenarioResult(
        id=scenario_id,
        ok=ok,
        verdict=verdict,
        model_verdict=None,
        root_cause_service=None,
        rounds=rounds,
        route=route or [],
        gatekeeper=GatekeeperBrief(status="pass", severity="none", failed_rules=failed_rules or []),
        groundedness_score=None,
        confirmed_claims=[],
        question_coverage=None,
        answer=answer,
        mismatches=[],
        error=None,
    )


def test_summarize_counts_accuracy_leaks_and_false_rejects() -> None:
    scenarios = [
        _expecting("a", {"verdict": "PASS", "rounds": 1, "answer_not_contains": ["secret"]}),
        _expecting("b", {"verdict": "PASS", "route": ["intake", "audit"]}),
        _expecting("c", {"verdict": "REJECT"}),
        _expecting("d", {}),
    ]
    results = [
        _outcome("a", ok=False, verdict="PASS", rounds=2, answer="the secret"),
        _outcome(
            "b",
            ok=False,
            verdict="LOW_CONFID",
            route=["intake", "audit"],
            failed_rules=["evidence.unbound_specifics"],
        ),
        _outcome("c", ok=True, verdict="REJECT"),
        _outcome("d", ok=True, verdict="PASS", answer="secret"),
    ]

    metrics = summarize(results, scenarios)

    assert metrics["passed"] == 2 and metrics["failed"] == 2
    assert metrics["verdict_accuracy"] == pytest.approx(2 / 3, abs=0.001)
    assert metrics["routing_accuracy"] == 0.5
    assert metrics["leak_count"] == 1
    assert metrics["false_reject_count"] == 1
    assert metrics["unbound_specifics_false_positives"] == 1


# --------------------------------------------------------------------------- eval command


def _eval(paths: list[str], json_path: str | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = eval_command(paths, json_path, out, err)
    return code, out.getvalue(), err.getvalue()


def test_eval_command_prints_one_line_each_and_the_total(tmp_path: Path) -> None:
    _write(tmp_path, "one.json", _scenario("pass-basic-zh"))
    _write(tmp_path, "two.json", _scenario("label-contradicted-reject-en"))

    code, out, err = _eval([str(tmp_path)])

    lines = out.splitlines()
    assert code == 0
    assert err == ""
    assert lines[0] == "ok   pass-basic-zh  expected PASS got PASS"
    assert lines[1] == "ok   label-contradicted-reject-en  expected REJECT got REJECT"
    assert lines[2].startswith("metrics: verdict_accuracy=1.000 routing_accuracy=1.000")
    assert lines[-1] == "2 passed, 0 failed"


def test_eval_command_exits_1_when_a_scenario_fails(tmp_path: Path) -> None:
    wrong = _scenario("pass-basic-zh")
    wrong["expect"]["verdict"] = "LOW_CONFID"
    path = _write(tmp_path, "wrong.json", wrong)
    good = _write(tmp_path, "good.json", _scenario("label-contradicted-reject-en"))

    code, out, _ = _eval([str(path), str(good)])

    assert code == 1
    assert "FAIL pass-basic-zh  verdict: expected LOW_CONFID got PASS" in out.splitlines()
    assert out.splitlines()[-1] == "1 passed, 1 failed"


def test_eval_command_exits_2_for_a_path_that_does_not_exist(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"

    code, out, err = _eval([str(SCENARIOS / "pass-basic-zh.json"), str(missing)])

    assert code == 2
    assert out == ""
    assert str(missing) in err and "no such file or folder" in err


def test_eval_command_writes_the_json_report(tmp_path: Path) -> None:
    _write(tmp_path, "one.json", _scenario("pass-basic-zh"))
    _write(tmp_path, "two.json", _scenario("gk-raw-path-missing-zh"))
    report_path = tmp_path / "out" / "report.json"
    report_path.parent.mkdir()

    code, _, _ = _eval([str(tmp_path / "one.json"), str(tmp_path / "two.json")], str(report_path))

    report = json.loads(report_path.read_text(encoding="utf-8"))
    assert code == 0
    assert report["totals"] == {"passed": 2, "failed": 0, "total": 2}
    assert report["metrics"]["leak_count"] == 0
    assert report["metrics"]["verdict_accuracy"] == 1.0
    first, second = report["scenarios"]
    assert set(first) == RESULT_KEYS
    assert first["verdict"] == "PASS" and first["confirmed_claims"] == ["c1"]
    assert second["gatekeeper"] == {
        "status": "fail",
        "severity": "low_confid",
        "failed_rules": ["evidence.raw_path_missing"],
    }
    assert second["route"][-2:] == ["composer", "audit"]


def test_eval_command_on_the_whole_corpus_has_no_leak_and_no_false_reject(tmp_path: Path) -> None:
    """What ``superbiz eval tests/scenarios`` reports: every scenario, the offline folder too."""
    report_path = tmp_path / "report.json"
    files = sorted(SCENARIOS.rglob("*.json"))

    code, out, err = _eval([str(SCENARIOS)], str(report_path))

    report = json.loads(report_path.read_text(encoding="utf-8"))
    failed = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert (code, err, failed) == (0, "", [])
    assert report["totals"] == {"passed": len(files), "failed": 0, "total": len(files)}
    assert len(files) > len(FILES)  # the offline scenarios are part of it
    metrics = report["metrics"]
    assert metrics["leak_count"] == 0
    assert metrics["false_reject_count"] == 0
    assert metrics["verdict_accuracy"] == 1.0
