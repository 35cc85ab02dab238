"""The ``superbiz`` command: offline diagnosis on the sample incident, output modes, bad input."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import apps.cli.main as cli
from models.budget import GetModel
from models.scripted import scripted_models
from state.context import Context

ROOT = Path(__file__).resolve().parents[1]
ORDER_QUESTION = "order-service 为什么报 500？"
NO_DATA_QUESTION = "notification-service 有错误吗？"
ZH_CONFIRMED = "【结论（已确认的事实）】"
ZH_EVIDENCE = "【证据】"
ZH_OFFLINE = "离线模式：本回答由确定性规则生成，未使用语言模型。"
EN_CONFIRMED = "## Conclusion (confirmed facts)"
EN_OFFLINE = "Offline mode: this answer was produced by deterministic rules"
DIAGNOSE_OPTIONS = (
    "--thread",
    "--lang",
    "--offline",
    "--env",
    "--composer",
    "--max-tool-calls",
    "--json",
    "--db",
    "--resume",
    "--help",
)
RUN_VARIABLES = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "SUPERBIZ_OFFLINE",
    "SUPERBIZ_LANGUAGE",
    "SUPERBIZ_COMPOSER_MODE",
    "SUPERBIZ_MAX_TOOL_CALLS",
)

CUSTOM_ENVIRONMENT: dict[str, Any] = {
    "now": "2026-04-02T08:30:00Z",
    "logs": [
        {
            "timestamp": "2026-04-02T08:12:00Z",
            "level": "ERROR",
            "service": "inventory-service",
            "instance": "inventory-7d9f-abcde",
            "message": "StockLedgerTimeoutException: ledger lock wait exceeded for sku QX-4411",
        },
        {
            "timestamp": "2026-04-02T08:13:00Z",
            "level": "INFO",
            "service": "inventory-service",
            "instance": "inventory-7d9f-abcde",
            "message": "reservation completed for sku QX-1001",
        },
    ],
    "alerts": [
        {
            "alert_name": "InventoryLedgerLockWaits",
            "service": "inventory-service",
            "severity": "warning",
            "state": "firing",
            "value": 41,
            "threshold": 10,
            "summary": "inventory-service ledger lock waits are above 10 per minute",
            "active_at": "2026-04-02T08:10:00Z",
        }
    ],
    "series": [],
    "documents": [],
}


@pytest.fixture(autouse=True)
def offline_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No API key and no run settings from the caller's shell: the offline models answer."""
    for name in RUN_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(err: str, *fragments: str) -> None:
    assert "Traceback" not in err
    last = err.rstrip("\n").splitlines()[-1]
    assert "error:" in last
    for fragment in fragments:
        assert fragment in last


# --- diagnosis on the bundled sample incident -------------------------------------------------


def test_cli_diagnose_answers_in_chinese_with_verified_evidence(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "diagnose", ORDER_QUESTION)

    assert code == 0
    assert ZH_CONFIRMED in out
    assert ZH_EVIDENCE in out
    assert "[inv-2]" in out and "[inv-4]" in out  # the metrics, and the incident analysis
    assert "校验结论：PASS" in out
    assert ZH_OFFLINE in out
    assert "verdict: PASS" in out
    assert "HikariPool-1" in out
    assert "answer_version" not in out
    # Progress goes to stderr, never into the answer.
    assert "offline mode: deterministic rules, no language model" in err
    assert "inv-1 query_logs -> ok" in err
    assert "done: PASS" in err
    assert "[round 1]" not in out


def test_cli_diagnose_lang_en_answers_in_english(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "diagnose", "why is order-service returning 500?", "--lang", "en")

    assert code == 0
    assert EN_CONFIRMED in out
    assert "## Evidence" in out
    assert "Verification: PASS" in out
    assert EN_OFFLINE in out
    assert ZH_CONFIRMED not in out
    assert "离线模式" not in out


def test_cli_diagnose_json_prints_exactly_one_object(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "diagnose", ORDER_QUESTION, "--json", "--thread", "t-cli-1")

    assert code == 0
    result = json.loads(out)  # the whole of stdout is one JSON document
    assert isinstance(result, dict)
    assert {
        "diagnosis_id",
        "thread_id",
        "verdict",
        "model_verdict",
        "groundedness_score",
        "rounds",
        "answer",
        "gatekeeper",
    } <= set(result)
    assert set(result["gatekeeper"]) == {"status", "severity", "failed_rules"}
    assert result["diagnosis_id"].startswith("diag-")
    assert result["thread_id"] == "t-cli-1"
    assert result["verdict"] == "PASS"
    assert result["model_verdict"] == "PASS"
    # The root cause is an inference (0.6), its chain direct observations (1.0).
    assert 0.9 <= result["groundedness_score"] < 1.0
    assert result["root_cause"]["service"] == "inventory-service"
    assert [s["service"] for s in result["suspects"]][:1] == ["inventory-service"]
    assert result["rounds"] == 1
    assert result["offline"] is True
    assert result["gatekeeper"] == {"status": "pass", "severity": "none", "failed_rules": []}
    assert ZH_CONFIRMED in result["answer"] and "inv-" in result["answer"]
    assert "done: PASS" in err


def test_cli_diagnose_service_without_data_is_not_pass_after_two_rounds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "diagnose", NO_DATA_QUESTION, "--json")

    assert code == 0  # every verdict is a successful run
    result = json.loads(out)
    assert result["verdict"] != "PASS"
    assert result["rounds"] == 2
    assert "notification-service" in result["answer"]
    assert ZH_CONFIRMED not in result["answer"]
    assert "one more round" in err


def test_cli_diagnose_env_file_data_shows_up_in_the_answer(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    env_file = tmp_path / "inventory.json"
    env_file.write_text(json.dumps(CUSTOM_ENVIRONMENT), encoding="utf-8")

    code, out, _ = run(
        capsys, "diagnose", "inventory-service 为什么报错？", "--env", str(env_file), "--json"
    )

    assert code == 0
    result = json.loads(out)
    assert result["verdict"] == "PASS"
    assert "StockLedgerTimeoutException" in result["answer"]
    assert "InventoryLedgerLockWaits" in result["answer"]
    # Nothing from the bundled sample incident leaks in.
    assert "HikariPool" not in result["answer"]
    assert "order-service" not in result["answer"]


def test_cli_diagnose_accepts_a_scenario_file_as_env(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    scenario = {"id": "inv", "question": "x", "environment": CUSTOM_ENVIRONMENT}
    env_file = tmp_path / "scenario.json"
    env_file.write_text(json.dumps(scenario), encoding="utf-8")

    code, out, _ = run(capsys, "diagnose", "is inventory-service alerting?", "--env", str(env_file))

    assert code == 0
    assert "InventoryLedgerLockWaits" in out


# --- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize("question", ["", "   ", "\t\n"], ids=["empty", "spaces", "whitespace"])
def test_cli_diagnose_rejects_an_empty_question(
    capsys: pytest.CaptureFixture[str], question: str
) -> None:
    code, out, err = run(capsys, "diagnose", question)

    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert_one_line_error(err, "superbiz: error:", "question is empty")


@pytest.mark.parametrize(
    ("name", "content", "fragment"),
    [
        pytest.param("missing.json", None, "does not exist", id="missing"),
        pytest.param("folder", "<dir>", "is a directory", id="directory"),
        pytest.param("latin1.json", b"\xff\xfe{}", "cannot read environment file", id="not-utf8"),
        pytest.param("broken.json", '{"logs": [', "is not valid JSON", id="invalid-json"),
        pytest.param("list.json", "[1, 2]", "must contain a JSON object", id="not-an-object"),
        pytest.param(
            "shape.json", '{"logs": [{"level": "ERROR"}]}', "missing required field", id="shape"
        ),
    ],
)
def test_cli_diagnose_rejects_a_bad_env_file(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    name: str,
    content: str | bytes | None,
    fragment: str,
) -> None:
    path = tmp_path / name
    if content == "<dir>":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content, encoding="utf-8")

    code, out, err = run(capsys, "diagnose", ORDER_QUESTION, "--env", str(path))

    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert_one_line_error(err, "superbiz: error:", str(path), fragment)


def test_cli_diagnose_rejects_an_invalid_lang(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "diagnose", ORDER_QUESTION, "--lang", "fr")

    assert code == 2
    assert_one_line_error(err, "--lang is 'fr': it must be 'zh' or 'en'")


@pytest.mark.parametrize("value", ["0", "-3", "abc"])
def test_cli_diagnose_rejects_a_bad_tool_budget(
    capsys: pytest.CaptureFixture[str], value: str
) -> None:
    code, _, err = run(capsys, "diagnose", ORDER_QUESTION, "--max-tool-calls", value)

    assert code == 2
    assert_one_line_error(
        err, f"--max-tool-calls is '{value}': it must be a whole number of at least 1"
    )


def test_cli_without_a_command_exits_with_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main([])
    _, err = capsys.readouterr()

    assert exit_info.value.code == 2
    assert_one_line_error(err, "COMMAND")


# --- failures during the run --------------------------------------------------------------------


def _failing_models(role: str, ctx: Context) -> Any:
    raise ConnectionError("model endpoint refused the connection\n(127.0.0.1:9)")


@pytest.fixture
def failing_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every graph the command line builds gets models whose endpoint refuses the connection."""
    monkeypatch.setattr("graph.builder.make_model_factory", lambda: _failing_models)


@pytest.mark.usefixtures("failing_models")
def test_cli_diagnose_reports_an_unexpected_failure_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "diagnose", ORDER_QUESTION, "--thread", "t-failed")

    assert code == 1
    assert "Traceback" not in err
    reason = "ConnectionError: model endpoint refused the connection (127.0.0.1:9)"
    assert err.splitlines()[-1] == f"superbiz: error: diagnosis failed: {reason}"
    # The user gets a degraded answer saying the diagnosis could not finish, and why.
    assert out.startswith(f"抱歉，本次诊断未能完成：{reason}")
    assert "status: failed" in out
    # The failure is recorded with its reason.
    code, listing, _ = run(capsys, "sessions", "list", "--thread", "t-failed", "--json")
    (record,) = json.loads(listing)
    assert record["status"] == "failed"
    assert record["note"] == f"failed: {reason}"
    assert record["final_answer"].startswith("抱歉，本次诊断未能完成")
    assert record["self_evaluation"]["failure"]["reason"] == reason


@pytest.mark.usefixtures("failing_models")
def test_cli_debug_variable_prints_the_traceback(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUPERBIZ_DEBUG", "1")

    code, _, err = run(capsys, "diagnose", ORDER_QUESTION)

    assert code == 1
    assert "Traceback (most recent call last)" in err
    assert "ConnectionError: model endpoint refused the connection" in err
    assert err.splitlines()[-1].startswith("superbiz: error: diagnosis failed: ConnectionError")


def _rejecting_models() -> GetModel:
    """The executor cites an invocation that never happened: the Gatekeeper rejects."""
    answer = {
        "answer_version": "executor_evidence_v2",
        "claims": [
            {
                "claim_id": "c1",
                "claim_type": "observation",
                "claim_text": "order-service logged connection pool timeouts",
                "support_level": "direct",
                "evidence_bindings": [
                    {
                        "source_type": "log",
                        "tool_name": "query_logs",
                        "source_invocation_id": "inv-9",
                        "raw_path": "logs[0]",
                        "evidence_excerpt": "Connection is not available",
                    }
                ],
            }
        ],
        "hypotheses": [],
        "recommended_actions": [],
        "missing_info": [],
    }
    verifier = {
        "verdict": "PASS",
        "claim_checks": [{"claim_id": "c1", "verification": "direct_observation"}],
        "rationale": "looks fine",
    }
    return scripted_models(
        {
            "planner": ["1. query_logs for order-service"],
            "executor": [
                {
                    "tool_calls": [
                        {
                            "name": "query_logs",
                            "args": {"service": "order-service", "level": "ERROR"},
                        }
                    ]
                },
                {"content": answer},
            ],
            "verifier": [verifier],
        }
    )


def test_cli_diagnose_exits_zero_on_a_reject_verdict(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    models = _rejecting_models()
    monkeypatch.setattr("graph.builder.make_model_factory", lambda: models)

    code, out, _ = run(capsys, "diagnose", ORDER_QUESTION, "--json")

    assert code == 0
    result = json.loads(out)
    assert result["verdict"] == "REJECT"
    assert result["model_verdict"] == "PASS"
    assert result["rounds"] == 1
    assert result["gatekeeper"]["severity"] == "reject"
    assert "evidence.invocation_ref" in result["gatekeeper"]["failed_rules"]
    # The unbacked claim is shown only as an evidence gap, never as a confirmed fact.
    assert result["answer"].startswith("抱歉，无法根据本次收集到的证据给出可靠的回答。")
    assert ZH_CONFIRMED not in result["answer"]
    assert "connection pool timeouts（本次未找到支持该说法的证据）" in result["answer"]


# --- help ---------------------------------------------------------------------------------------


def test_cli_help_lists_the_diagnose_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    out, _ = capsys.readouterr()

    assert exit_info.value.code == 0
    assert "usage: superbiz" in out
    assert "diagnose" in out
    assert "--help" in out


def test_cli_diagnose_help_lists_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["diagnose", "--help"])
    out, _ = capsys.readouterr()

    assert exit_info.value.code == 0
    for option in DIAGNOSE_OPTIONS:
        assert option in out, option
    assert "question" in out
    # The parser has no option that the help leaves out.
    commands = next(a for a in cli._parser()._actions if isinstance(a, argparse._SubParsersAction))
    diagnose = commands.choices["diagnose"]
    declared = {s for a in diagnose._actions for s in a.option_strings if s.startswith("--")}
    assert declared == set(DIAGNOSE_OPTIONS)


# --- the installed command, as a real process ---------------------------------------------------


def _command() -> list[str]:
    script = Path(sys.executable).with_name("superbiz")
    return [str(script)] if script.exists() else [sys.executable, "-m", "apps.cli"]


def _process_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in RUN_VARIABLES}
    env.pop("PYTHONIOENCODING", None)
    return env


def test_cli_subprocess_diagnoses_the_sample_incident() -> None:
    proc = subprocess.run(
        [*_command(), "diagnose", ORDER_QUESTION],
        capture_output=True,
        cwd=ROOT,
        env=_process_env(),
        timeout=300,
        check=False,
    )
    out, err = proc.stdout.decode("utf-8"), proc.stderr.decode("utf-8")

    assert proc.returncode == 0, err
    assert ZH_CONFIRMED in out
    assert "[inv-" in out
    assert "校验结论：PASS" in out
    assert ZH_OFFLINE in out
    assert "offline mode: deterministic rules, no language model" in err
    assert "done: PASS" in err
    assert "Traceback" not in err


def test_cli_subprocess_rejects_an_empty_question_without_traceback() -> None:
    proc = subprocess.run(
        [*_command(), "diagnose", "  "],
        capture_output=True,
        cwd=ROOT,
        env=_process_env(),
        timeout=300,
        check=False,
    )
    err = proc.stderr.decode("utf-8")

    assert proc.returncode == 2
    assert proc.stdout == b""
    assert err.count("\n") == 1
    assert_one_line_error(err, "superbiz: error:", "question is empty")


def test_cli_eval_runs_scenario_files(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    code, out, _ = run(
        capsys,
        "eval",
        str(ROOT / "tests" / "scenarios" / "pass-basic-zh.json"),
        "--json",
        str(report),
    )

    assert code == 0
    assert out.splitlines()[-1] == "1 passed, 0 failed"
    assert json.loads(report.read_text(encoding="utf-8"))["totals"]["passed"] == 1


def test_cli_eval_missing_path_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "eval", "no/such/scenarios")

    assert code == 2
    assert "no/such/scenarios" in err
