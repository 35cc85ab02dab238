"""A question asking which errors were logged gets those lines; a why question gets the cause.

"What FATAL errors did postgres log?", "有什么错误？", "哪些报错？", "list the FATAL lines" ask
for the matching log lines: the answer opens with them, each quoted and bound to its ref. "Why",
"what caused", "为什么", "根因" ask for the cause: the answer opens with the root cause the
incident analysis found.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

import apps.cli.main as cli
from evidence.environment import default_environment
from models.offline.question_kinds import plan_for
from models.offline.rules import plan_steps
from persistence.store import open_persistence
from verification.coverage import intent_facets
from verification.intent import read_intent

KNOWN = ["api-gateway", "inventory-service", "order-service", "payment-service", "postgres"]


@pytest.mark.parametrize(
    "question",
    [
        "What FATAL errors did postgres log recently?",
        "what errors did order-service log?",
        "Which errors has order-service logged in the last 30 minutes?",
        "Which exceptions does order-service throw?",
        "List the FATAL lines of postgres",
        "show me the error lines of order-service",
        "What errors are there?",
        "postgres 最近有什么 FATAL 错误？",
        "order-service 有哪些报错？",
        "order-service 报了哪些错？",
        "列出 postgres 的 FATAL 日志",
        "最近有什么错误？",
        "order-service 过去 30 分钟有什么错误日志？",
    ],
)
def test_read_intent_a_question_asking_which_errors_is_a_listing(question: str) -> None:
    intent = read_intent(question, KNOWN)
    assert (intent.kind, intent.polarity) == ("listing", None)


@pytest.mark.parametrize(
    ("question", "kind"),
    [
        ("Why does postgres log FATAL errors?", "why"),
        ("What caused the errors of order-service?", "why"),
        ("What is the root cause of order-service's errors?", "why"),
        ("postgres 为什么有 FATAL 错误？", "why"),
        ("order-service 报错的根因是什么？", "why"),
        ("什么导致了 order-service 的错误？", "why"),
        ("Does order-service have errors?", "errors"),
        ("order-service 有错误吗？", "errors"),
        ("order-service 有没有报错？", "errors"),
        ("What is the error rate of order-service?", "value"),
        ("order-service 的错误率是多少？", "value"),
        ("What is wrong with order-service?", "why"),
        ("What errors are worth fixing first, and what should I do?", "action"),
    ],
)
def test_read_intent_other_questions_about_errors_keep_their_kind(question: str, kind: str) -> None:
    assert read_intent(question, KNOWN).kind == kind


def _facts(question: str) -> dict[str, Any]:
    return {"question": question, "round": 1, "known_services": KNOWN}


@pytest.mark.parametrize(
    ("question", "level"),
    [
        ("What FATAL errors did postgres log recently?", "FATAL"),
        ("postgres 最近有什么 FATAL 错误？", "FATAL"),
        ("order-service 有哪些报错？", "ERROR"),
    ],
)
def test_plan_for_a_listing_reads_the_lines_at_the_level_asked(question: str, level: str) -> None:
    service = "postgres" if level == "FATAL" else "order-service"
    assert plan_for(_facts(question)) == [("query_logs", {"service": service, "level": level})]


def test_plan_for_a_why_question_still_starts_the_incident_analysis() -> None:
    steps = plan_for(_facts("postgres 为什么有 FATAL 错误？"))
    assert steps == plan_steps(_facts("postgres 为什么有 FATAL 错误？"))
    assert ("query_logs", {"service": "postgres", "level": "FATAL"}) in steps
    assert any(tool == "analyze_incident" for tool, _ in steps)


def test_coverage_a_listing_is_answered_only_by_a_claim_naming_the_level() -> None:
    question = "What FATAL errors did postgres log recently?"
    empty: Any = {"recommended_actions": [], "claims": []}
    asked, unanswered = intent_facets(
        question, KNOWN, empty, ["inventory-service is the most likely root cause"]
    )
    assert asked == ["log lines"] and unanswered == ["log lines"]
    said = ['postgres logged at 2026-03-01 10:12:00 UTC (FATAL): "database "x" does not exist"']
    assert intent_facets(question, KNOWN, empty, said) == (["log lines"], [])


# --------------------------------------------------------------------------- end to end

FATAL_LINES = [
    ("2026-03-01T10:12:00Z", 'database "reports_old" does not exist'),
    ("2026-03-01T10:21:30Z", 'password authentication failed for user "shop"'),
    ("2026-03-01T10:26:45Z", 'database "reports_old" does not exist'),
]


@pytest.fixture
def sample_with_postgres(tmp_path: Path) -> Path:
    """The bundled sample incident (its analysis finds a root cause in inventory-service), with
    a postgres that logged FATAL lines besides."""
    environment = copy.deepcopy(default_environment())
    for stamp, message in FATAL_LINES:
        environment["logs"].append(
            {"timestamp": stamp, "level": "FATAL", "service": "postgres", "message": message}
        )
    path = tmp_path / "environment.json"
    path.write_text(json.dumps(environment), encoding="utf-8")
    return path


def _diagnose(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, question: str, *args: str
) -> dict[str, Any]:
    db = f"sqlite:///{tmp_path / 'db.sqlite'}"
    argv = ["diagnose", question, *args, "--offline", "--json", "--db", db]
    assert cli.main(argv) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


def _conclusions(answer: str) -> list[str]:
    """The bullets of the answer's first section (the conclusion, then the confirmed facts)."""
    lines = answer.split("\n\n## Evidence")[0].split("\n\n【证据】")[0].splitlines()
    return [line for line in lines if line.startswith("- ")]


@pytest.mark.parametrize(
    ("question", "language"),
    [
        ("What FATAL errors did postgres log recently?", "en"),
        ("postgres 最近有什么 FATAL 错误？", "zh"),
    ],
)
def test_listing_answer_opens_with_every_line_found_not_with_the_analysis(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    sample_with_postgres: Path,
    question: str,
    language: str,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    result = _diagnose(
        capsys, tmp_path, question, "--lang", language, "--env", str(sample_with_postgres)
    )

    assert result["verdict"] == "PASS", result["answer"]
    answer = str(result["answer"])
    bullets = _conclusions(answer)
    assert bullets and "FATAL" in bullets[0] and "postgres" in bullets[0]
    for _, message in FATAL_LINES:
        assert message in answer
    assert "10:21:30" in answer  # each line with its time
    # The incident analysis is not what was asked: it never comes before the lines.
    for marker in ("inventory-service", "最可能的根因", "most likely root cause"):
        assert marker not in "\n".join(bullets[:4])


def test_listing_answer_binds_each_quoted_line_to_its_log_ref(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    sample_with_postgres: Path,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    db = f"sqlite:///{tmp_path / 'db.sqlite'}"
    argv = ["diagnose", "列出 postgres 的 FATAL 日志", "--offline", "--json", "--db", db]
    assert cli.main([*argv, "--env", str(sample_with_postgres)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert cli.main(["sessions", "show", result["diagnosis_id"], "--json", "--db", db]) == 0
    record = json.loads(capsys.readouterr().out)
    evaluation = record["self_evaluation"]["verifier_evaluation"]
    claims = evaluation["executor_structured_output"]["claims"]

    lines = [
        binding
        for claim in claims
        for binding in claim["evidence_bindings"]
        if binding["tool_name"] == "query_logs" and binding["raw_path"].startswith("logs[")
    ]
    # Every line found, the repeated message too, each bound to its own entry.
    assert len({binding["raw_path"] for binding in lines}) == len(FATAL_LINES)
    assert {binding["evidence_excerpt"] for binding in lines} == {m for _, m in FATAL_LINES}
    cited = {b["tool_name"] for claim in claims for b in claim["evidence_bindings"]}
    assert "analyze_incident" not in cited
    assert result["verdict"] == "PASS"
    assert evaluation["question_coverage"]["status"] == "answered"


@pytest.mark.parametrize(
    ("question", "language"),
    [
        ("order-service 为什么报 500 错误？", "zh"),
        ("What caused the errors of order-service?", "en"),
    ],
)
def test_why_answer_still_opens_with_the_root_cause(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    question: str,
    language: str,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    result = _diagnose(capsys, tmp_path, question, "--lang", language)

    assert result["verdict"] == "PASS", result["answer"]
    assert result["root_cause"]["service"] == "inventory-service"
    first = _conclusions(str(result["answer"]))[0]
    assert "inventory-service" in first
    assert ("最可能的根因" if language == "zh" else "most likely root cause") in first.casefold()


def test_listing_reads_only_the_services_asked_about(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A why question follows the services its error lines name; a listing does not: the line
    "upstream payroll-api returned 500" of payslip-worker is listed, payroll-api is not read."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    environment = Path(__file__).parent / "environments" / "payroll-migration.json"
    db = f"sqlite:///{tmp_path / 'db.sqlite'}"
    argv = ["diagnose", "payslip-worker 有哪些报错？", "--offline", "--json", "--db", db]
    assert cli.main([*argv, "--env", str(environment)]) == 0
    result = json.loads(capsys.readouterr().out)
    persistence = open_persistence(db)
    try:
        calls = persistence.ledger.list(str(result["diagnosis_id"]))
    finally:
        persistence.close()

    assert result["verdict"] == "PASS"
    assert "batch step failed: upstream payroll-api returned 500" in result["answer"]
    logs = [call["arguments"] for call in calls if call["tool_name"] == "query_logs"]
    assert logs == [{"service": "payslip-worker", "level": "ERROR"}]
