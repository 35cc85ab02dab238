"""Scenario evaluation (contracts section 9): drive the real graph with scripted model replies.

A scenario file holds a question, a small evidence environment served by the sample backend,
the scripted replies of every model role and the expected outcome. ``run_scenario`` builds the
real graph around them, runs one diagnosis and compares the final state with ``expect``;
``eval_command`` is what ``superbiz eval PATH... [--json FILE]`` runs.

Script shape: ``script.rounds`` is a list of one or two rounds, each ``{"planner": reply,
"executor": [step, ...], "verifier": reply}``; an executor step is ``{"tool_calls": [{"name",
"args"}]}`` or ``{"content": reply}``; ``verifier`` may also be a list of replies, one per
attempt, for a round whose first replies cannot be parsed and are repaired. ``script.composer``
(optional) is the composer model's reply and switches the composer to model mode. A reply is a
string or a JSON object (sent as its JSON text). Besides the documented keys, a scenario may carry
a free-text ``description``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TextIO

from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver

from graph.builder import build_graph
from graph.runner import state_of, summary_of
from graph.scripted import ScriptExhausted, scripted_models
from nodes.common import GetModel
from persistence.audit import InMemoryAuditStore
from persistence.ledger import InMemoryLedger
from state.context import Context
from state.graph_state import DiagnosisState
from state.records import CONFIRMED_LABELS, VERDICTS
from tools.sample import EnvironmentFileError, SampleBackend, json_type, validate_environment
from verification.answer import select_material

EXPECT_KEYS: tuple[str, ...] = (
    "verdict",
    "model_verdict",
    "rounds",
    "route",
    "gatekeeper_status",
    "gatekeeper_severity",
    "gatekeeper_failed_rules",
    "groundedness_score",
    "confirmed_claims",
    "answer_contains",
    "answer_not_contains",
)
"""The keys ``expect`` may hold (all optional)."""

SCENARIO_KEYS: frozenset[str] = frozenset(
    {"id", "question", "language", "environment", "script", "expect", "description"}
)
"""The top-level keys a scenario file may hold."""

ROUND_KEYS: frozenset[str] = frozenset({"planner", "executor", "verifier"})
"""The keys of one scripted round."""

SCORE_TOLERANCE = 0.001
"""How far the groundedness score may be from the expected one."""

MAX_ROUNDS = 2
"""A diagnosis has at most two rounds, so a script has at most two."""

UNBOUND_SPECIFICS = "evidence.unbound_specifics"

_GATEKEEPER_STATUSES = ("pass", "warn", "fail")
_GATEKEEPER_SEVERITIES = ("none", "low_confid", "reject")
_EXHAUSTED_ROLE = re.compile(r"no (?:more )?(\w+) replies")

Fail = Callable[[str], NoReturn]
"""Reports a scenario problem (raises ``ScenarioError``)."""


class ScenarioError(ValueError):
    """A scenario file cannot be used; the one-line message names the file and the problem."""


# --------------------------------------------------------------------------- loading


def _is_reply(value: Any) -> bool:
    return isinstance(value, str | dict)


def _check_reply(value: Any, where: str, fail: Fail) -> None:
    if not _is_reply(value):
        fail(f"{where} must be a string or a JSON object, got {json_type(value)}")


def _check_executor_step(step: Any, where: str, fail: Fail) -> None:
    if not isinstance(step, dict):
        fail(f"{where} must be an object with 'tool_calls' or 'content', got {json_type(step)}")
    unknown = sorted(set(step) - {"tool_calls", "content"})
    if unknown:
        fail(f"{where} has unknown key(s) {', '.join(unknown)}; use 'tool_calls' or 'content'")
    if "tool_calls" not in step and "content" not in step:
        fail(f"{where} needs 'tool_calls' or 'content'")
    if "content" in step:
        _check_reply(step["content"], f"{where}.content", fail)
    if "tool_calls" in step:
        calls = step["tool_calls"]
        if not isinstance(calls, list) or not calls:
            fail(f"{where}.tool_calls must be a non-empty array of {{name, args}} objects")
        for index, call in enumerate(calls):
            at = f"{where}.tool_calls[{index}]"
            if not isinstance(call, dict):
                fail(f"{at} must be an object {{name, args}}, got {json_type(call)}")
            if not isinstance(call.get("name"), str) or not call["name"]:
                fail(f"{at}.name must be a tool name")
            if "args" in call and not isinstance(call["args"], dict):
                fail(f"{at}.args must be an object, got {json_type(call['args'])}")
            extra = sorted(set(call) - {"name", "args", "id"})
            if extra:
                fail(f"{at} has unknown key(s) {', '.join(extra)}")


def _check_round(item: Any, where: str, fail: Fail) -> None:
    if not isinstance(item, dict):
        fail(f"{where} must be an object with planner, executor and verifier")
    unknown = sorted(set(item) - ROUND_KEYS)
    if unknown:
        allowed = ", ".join(sorted(ROUND_KEYS))
        fail(f"{where} has unknown key(s) {', '.join(unknown)}; allowed: {allowed}")
    for key in ("planner", "executor", "verifier"):
        if key not in item:
            fail(f"{where} is missing '{key}'")
    _check_reply(item["planner"], f"{where}.planner", fail)
    steps = item["executor"]
    if not isinstance(steps, list) or not steps:
        fail(f"{where}.executor must be a non-empty array of steps")
    for index, step in enumerate(steps):
        _check_executor_step(step, f"{where}.executor[{index}]", fail)
    verifier = item["verifier"]
    if isinstance(verifier, list):
        if not verifier:
            fail(f"{where}.verifier must not be an empty array")
        for index, reply in enumerate(verifier):
            _check_reply(reply, f"{where}.verifier[{index}]", fail)
    else:
        _check_reply(verifier, f"{where}.verifier", fail)


def _check_string_list(value: Any, where: str, fail: Fail) -> None:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        fail(f"{where} must be an array of strings")


def _check_expect(expect: Any, fail: Fail) -> None:
    if not isinstance(expect, dict):
        fail(f"expect must be an object, got {json_type(expect)}")
    unknown = sorted(set(expect) - set(EXPECT_KEYS))
    if unknown:
        fail(f"expect has unknown key(s) {', '.join(unknown)}; allowed: {', '.join(EXPECT_KEYS)}")
    if "verdict" in expect and expect["verdict"] not in VERDICTS:
        fail(f"expect.verdict must be one of {', '.join(VERDICTS)}")
    if "model_verdict" in expect and expect["model_verdict"] not in (*VERDICTS, None):
        fail(f"expect.model_verdict must be one of {', '.join(VERDICTS)} or null")
    rounds = expect.get("rounds")
    if "rounds" in expect and (
        isinstance(rounds, bool) or not isinstance(rounds, int) or not 1 <= rounds <= MAX_ROUNDS
    ):
        fail("expect.rounds must be 1 or 2")
    if "gatekeeper_status" in expect and expect["gatekeeper_status"] not in _GATEKEEPER_STATUSES:
        fail(f"expect.gatekeeper_status must be one of {', '.join(_GATEKEEPER_STATUSES)}")
    severity = expect.get("gatekeeper_severity")
    if "gatekeeper_severity" in expect and severity not in _GATEKEEPER_SEVERITIES:
        fail(f"expect.gatekeeper_severity must be one of {', '.join(_GATEKEEPER_SEVERITIES)}")
    score = expect.get("groundedness_score")
    if "groundedness_score" in expect and (
        isinstance(score, bool) or not isinstance(score, int | float) or not 0.0 <= score <= 1.0
    ):
        fail("expect.groundedness_score must be a number between 0 and 1")
    for key in (
        "route",
        "gatekeeper_failed_rules",
        "confirmed_claims",
        "answer_contains",
        "answer_not_contains",
    ):
        if key in expect:
            _check_string_list(expect[key], f"expect.{key}", fail)


def validate_scenario(data: Any, origin: str = "scenario") -> dict[str, Any]:
    """Check that ``data`` is a usable scenario.

    Args:
        data: The parsed scenario object.
        origin: How to name the scenario in messages (usually its file path).

    Returns:
        The scenario, unchanged.

    Raises:
        ScenarioError: With a one-line message naming ``origin`` and what is wrong.
    """

    def fail(reason: str) -> NoReturn:
        raise ScenarioError(f"{origin}: {reason}")

    if not isinstance(data, dict):
        fail(f"a scenario must be a JSON object, got {json_type(data)}")
    unknown = sorted(set(data) - SCENARIO_KEYS)
    if unknown:
        fail(f"unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(SCENARIO_KEYS))}")
    for key in ("id", "question"):
        value = data.get(key)
        if not isinstance(value, str) or not value.strip():
            fail(f"'{key}' must be a non-empty string")
    if data.get("language") not in ("zh", "en"):
        fail(f"'language' must be 'zh' or 'en', got {data.get('language')!r}")
    if "description" in data and not isinstance(data["description"], str):
        fail("'description' must be a string")
    if "environment" not in data:
        fail("'environment' is missing")
    try:
        validate_environment(data["environment"], origin="environment")
    except EnvironmentFileError as exc:
        fail(str(exc))
    script = data.get("script")
    if not isinstance(script, dict):
        fail(f"'script' must be an object with 'rounds', got {json_type(script)}")
    unknown = sorted(set(script) - {"rounds", "composer"})
    if unknown:
        fail(f"script has unknown key(s) {', '.join(unknown)}; allowed: rounds, composer")
    rounds = script.get("rounds")
    if not isinstance(rounds, list) or not 1 <= len(rounds) <= MAX_ROUNDS:
        fail("script.rounds must be an array of one or two rounds")
    for index, item in enumerate(rounds):
        _check_round(item, f"script.rounds[{index}]", fail)
    if "composer" in script:
        _check_reply(script["composer"], "script.composer", fail)
    _check_expect(data.get("expect", {}), fail)
    return data


def load_scenario(path: str | Path) -> dict[str, Any]:
    """Read and check one scenario file.

    Args:
        path: A scenario JSON file.

    Returns:
        The scenario object.

    Raises:
        ScenarioError: The file cannot be read, is not JSON, or is not a valid scenario; the
            one-line message names the file and what is wrong.
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(f"{file}: no such file") from None
    except IsADirectoryError:
        raise ScenarioError(f"{file}: is a folder, not a scenario file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{file}: cannot read it ({type(exc).__name__}: {exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScenarioError(
            f"{file}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    return validate_scenario(data, origin=str(file))


# --------------------------------------------------------------------------- running


def script_replies(scenario: dict[str, Any]) -> dict[str, list[Any]]:
    """The scripted replies of each role, in the order the graph asks for them."""
    script = scenario["script"]
    replies: dict[str, list[Any]] = {"planner": [], "executor": [], "verifier": []}
    for item in script["rounds"]:
        replies["planner"].append(item["planner"])
        replies["executor"].extend(item["executor"])
        verifier = item["verifier"]
        replies["verifier"].extend(verifier if isinstance(verifier, list) else [verifier])
    if "composer" in script:
        replies["composer"] = [script["composer"]]
    return replies


def _empty_result(scenario_id: str) -> dict[str, Any]:
    return {
        "id": scenario_id,
        "ok": False,
        "verdict": None,
        "model_verdict": None,
        "rounds": None,
        "route": [],
        "gatekeeper": {"status": None, "severity": None, "failed_rules": []},
        "groundedness_score": None,
        "confirmed_claims": [],
        "answer": "",
        "mismatches": [],
        "error": None,
    }


def confirmed_claims(state: DiagnosisState) -> list[str]:
    """Final-round claim ids the answer presents as established.

    A claim counts when its final label is direct_observation or reasonable_inference, the
    answer material selects it as confirmed (``select_material``), and its text is in the answer
    (a degraded answer leaves inferences out).
    """
    if "verifier_result" not in state:
        return []
    checks = state["verifier_result"]["claim_checks"]
    labels = {check["claim_id"]: check["verification"] for check in checks}
    material = select_material(checks, state["executor_answer"], state["gatekeeper_result"])
    answer = state.get("answer", "")
    found = [
        item["claim_id"]
        for item in material["confirmed"]
        if labels.get(item["claim_id"]) in CONFIRMED_LABELS and item["claim_text"] in answer
    ]
    return sorted(set(found))


def _fill(result: dict[str, Any], state: DiagnosisState) -> None:
    summary = summary_of(state, "-") if "run_info" in state else None
    result.update(
        verdict=state.get("verdict") or None,
        model_verdict=summary["model_verdict"] if summary else None,
        rounds=state.get("round"),
        route=list(state.get("route", [])),
        gatekeeper=dict(summary["gatekeeper"])
        if summary
        else {"status": None, "severity": None, "failed_rules": []},
        groundedness_score=state["verifier_result"]["groundedness_score"]
        if "verifier_result" in state
        else None,
        confirmed_claims=confirmed_claims(state),
        answer=state.get("answer", ""),
    )


def _show(values: Iterable[Any]) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"


def compare(expect: dict[str, Any], result: dict[str, Any]) -> list[str]:
    """Readable differences between ``expect`` and a run's result (empty when all match)."""
    problems: list[str] = []
    gatekeeper = result["gatekeeper"]
    plain = (
        ("verdict", result["verdict"]),
        ("model_verdict", result["model_verdict"]),
        ("rounds", result["rounds"]),
        ("gatekeeper_status", gatekeeper["status"]),
        ("gatekeeper_severity", gatekeeper["severity"]),
    )
    for key, actual in plain:
        if key in expect and expect[key] != actual:
            problems.append(f"{key}: expected {expect[key]} got {actual}")
    if "route" in expect and list(expect["route"]) != result["route"]:
        problems.append(
            f"route: expected {' > '.join(expect['route'])} got {' > '.join(result['route'])}"
        )
    for key, actual_list in (
        ("gatekeeper_failed_rules", gatekeeper["failed_rules"]),
        ("confirmed_claims", result["confirmed_claims"]),
    ):
        if key in expect and set(expect[key]) != set(actual_list):
            problems.append(
                f"{key}: expected {_show(sorted(set(expect[key])))} "
                f"got {_show(sorted(set(actual_list)))}"
            )
    if "groundedness_score" in expect:
        actual_score = result["groundedness_score"]
        if (
            not isinstance(actual_score, int | float)
            or abs(float(actual_score) - float(expect["groundedness_score"])) > SCORE_TOLERANCE
        ):
            problems.append(
                f"groundedness_score: expected {expect['groundedness_score']} got {actual_score}"
            )
    answer = result["answer"]
    for text in expect.get("answer_contains", []):
        if text not in answer:
            problems.append(f"answer does not contain {text!r}")
    for text in expect.get("answer_not_contains", []):
        if text in answer:
            problems.append(f"answer contains {text!r}, which must never be presented")
    return problems


def _unused_replies(get_model: Any, replies: dict[str, list[Any]], ctx: Context) -> list[str]:
    """One mismatch per role whose scripted replies were not all used."""
    problems = []
    for role in replies:
        remaining = len(list(get_model(role, ctx).messages))
        if remaining:
            plural = "reply" if remaining == 1 else "replies"
            problems.append(f"script has {remaining} unused {role} {plural}")
    return problems


@dataclass
class _Prepared:
    """A compiled graph wired to a scenario's scripted models and environment."""

    app: Any
    config: RunnableConfig
    context: Context
    get_model: GetModel
    replies: dict[str, list[Any]]
    question: str

    def invoke(self) -> DiagnosisState:
        self.app.invoke(
            {"messages": [HumanMessage(self.question)]}, config=self.config, context=self.context
        )
        return self.state()

    def state(self) -> DiagnosisState:
        return state_of(self.app, self.config)


def _prepare(scenario: dict[str, Any]) -> _Prepared:
    scenario_id = str(scenario.get("id") or "?")
    validate_scenario(scenario, origin=scenario_id)
    replies = script_replies(scenario)
    get_model = scripted_models(replies)
    context = Context(
        offline=False,
        language=scenario["language"],
        composer_mode="model" if "composer" in replies else "template",
    )
    app = build_graph(
        get_model=get_model,
        backend=SampleBackend(scenario["environment"]),
        ledger=InMemoryLedger(),
        audit=InMemoryAuditStore(),
    ).compile(checkpointer=InMemorySaver())
    config: RunnableConfig = {"configurable": {"thread_id": f"eval-{scenario_id}"}}
    return _Prepared(app, config, context, get_model, replies, scenario["question"])


def run_graph(scenario: dict[str, Any]) -> DiagnosisState:
    """Run a scenario's diagnosis and return the graph's full final state (no comparison).

    Raises:
        ScenarioError: The scenario is not valid.
        ScriptExhausted: A role ran out of scripted replies.
    """
    return _prepare(scenario).invoke()


def run_scenario(scenario: dict[str, Any]) -> dict[str, Any]:
    """Run one scenario through the real graph and compare the outcome with its ``expect``.

    Never raises for a problem of the scenario or the product: a script that runs out of replies
    gives the mismatch ``script ran out of <role> replies``, any other exception is reported in
    ``error`` (and as a mismatch), and scripted replies left unused are mismatches too.

    Args:
        scenario: A scenario as returned by ``load_scenario``.

    Returns:
        ``{id, ok, verdict, model_verdict, rounds, route, gatekeeper: {status, severity,
        failed_rules}, groundedness_score, confirmed_claims, answer, mismatches, error}``.
    """
    result = _empty_result(str(scenario.get("id") or "?"))
    prepared: _Prepared | None = None
    try:
        prepared = _prepare(scenario)
        _fill(result, prepared.invoke())
        mismatches = compare(scenario.get("expect") or {}, result)
        mismatches.extend(_unused_replies(prepared.get_model, prepared.replies, prepared.context))
        result["mismatches"] = mismatches
    except ScriptExhausted as exc:
        found = _EXHAUSTED_ROLE.search(str(exc))
        role = found.group(1) if found else "model"
        result["error"] = f"scenario error: {exc}"
        result["mismatches"] = [f"script ran out of {role} replies"]
        _fill_partial(result, prepared)
    except Exception as exc:  # any failure is reported for this scenario, never raised
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["mismatches"] = [f"run failed: {result['error']}"]
        _fill_partial(result, prepared)
    result["ok"] = not result["mismatches"] and result["error"] is None
    return result


def _fill_partial(result: dict[str, Any], prepared: _Prepared | None) -> None:
    """Fill what the last checkpoint of an interrupted run shows (best effort, for reading)."""
    if prepared is None:
        return
    try:
        _fill(result, prepared.state())
    except Exception:  # the partial state is only a reading aid
        return


# --------------------------------------------------------------------------- paths


def scenario_files(paths: Sequence[str | Path]) -> list[Path]:
    """The scenario files named by ``paths``: files as given, folders recursively (``*.json``).

    Raises:
        FileNotFoundError: A path does not exist.
    """
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files.extend(sorted(p for p in path.rglob("*.json") if p.is_file()))
        elif path.exists():
            files.append(path)
        else:
            raise FileNotFoundError(f"{path}: no such file or folder")
    return files


def _load_all(paths: Sequence[str | Path]) -> list[tuple[Path, dict[str, Any] | None, str | None]]:
    loaded: list[tuple[Path, dict[str, Any] | None, str | None]] = []
    seen: dict[str, Path] = {}
    for file in scenario_files(paths):
        try:
            scenario = load_scenario(file)
        except ScenarioError as exc:
            loaded.append((file, None, str(exc)))
            continue
        first = seen.get(scenario["id"])
        if first is not None:
            loaded.append(
                (file, None, f"{file}: scenario id {scenario['id']!r} is already used by {first}")
            )
            continue
        seen[scenario["id"]] = file
        loaded.append((file, scenario, None))
    return loaded


def _invalid_result(file: Path, reason: str) -> dict[str, Any]:
    result = _empty_result(str(file))
    result["error"] = reason
    result["mismatches"] = [f"invalid scenario: {reason}"]
    return result


def _run_loaded(
    loaded: list[tuple[Path, dict[str, Any] | None, str | None]],
) -> list[dict[str, Any]]:
    results = []
    for file, scenario, reason in loaded:
        if scenario is None:
            results.append(_invalid_result(file, reason or f"{file}: invalid scenario"))
        else:
            results.append(run_scenario(scenario))
    return results


def run_paths(paths: list[str]) -> list[dict[str, Any]]:
    """Run every scenario named by ``paths`` (files, or folders searched recursively).

    A file that is not a valid scenario gives a result with ``ok`` false and the reason in
    ``error``; the other scenarios still run.

    Raises:
        FileNotFoundError: A path does not exist.
    """
    return _run_loaded(_load_all(paths))


# --------------------------------------------------------------------------- metrics


def _fraction(hits: int, total: int) -> float | None:
    return round(hits / total, 4) if total else None


def summarize(results: list[dict[str, Any]], scenarios: list[dict[str, Any]]) -> dict[str, Any]:
    """Corpus metrics.

    Args:
        results: Results of ``run_scenario`` (or ``run_paths``).
        scenarios: The scenarios that were run; matched to results by id.

    Returns:
        ``{passed, failed, total, verdict_accuracy, routing_accuracy, leak_count,
        false_reject_count, unbound_specifics_false_positives}``. ``verdict_accuracy``: fraction
        of scenarios with an expected verdict that got it; ``routing_accuracy``: fraction of
        scenarios with an expected route or rounds whose route and rounds matched (None when no
        scenario states one); ``leak_count``: scenarios whose answer contains one of their
        ``answer_not_contains`` texts; ``false_reject_count``: scenarios expected to PASS that did
        not; ``unbound_specifics_false_positives``: scenarios expected to PASS whose Gatekeeper
        failed ``evidence.unbound_specifics``.
    """
    expects = {str(s.get("id")): s.get("expect") or {} for s in scenarios if isinstance(s, dict)}
    verdict_total = verdict_hits = routing_total = routing_hits = 0
    leaks = false_rejects = unbound = 0
    for result in results:
        expect = expects.get(str(result.get("id")))
        if expect is None:
            continue
        if "verdict" in expect:
            verdict_total += 1
            verdict_hits += result.get("verdict") == expect["verdict"]
        if "route" in expect or "rounds" in expect:
            routing_total += 1
            routed = ("route" not in expect or list(expect["route"]) == result.get("route")) and (
                "rounds" not in expect or expect["rounds"] == result.get("rounds")
            )
            routing_hits += routed
        answer = str(result.get("answer") or "")
        if any(text in answer for text in expect.get("answer_not_contains", [])):
            leaks += 1
        if expect.get("verdict") == "PASS":
            false_rejects += result.get("verdict") != "PASS"
            rules = (result.get("gatekeeper") or {}).get("failed_rules") or []
            unbound += UNBOUND_SPECIFICS in rules
    passed = sum(1 for r in results if r.get("ok"))
    return {
        "passed": passed,
        "failed": len(results) - passed,
        "total": len(results),
        "verdict_accuracy": _fraction(verdict_hits, verdict_total),
        "routing_accuracy": _fraction(routing_hits, routing_total),
        "leak_count": leaks,
        "false_reject_count": false_rejects,
        "unbound_specifics_false_positives": unbound,
    }


# --------------------------------------------------------------------------- command


def _line(result: dict[str, Any], expect: dict[str, Any]) -> str:
    if result["ok"]:
        return (
            f"ok   {result['id']}  expected {expect.get('verdict') or '-'} "
            f"got {result['verdict'] or '-'}"
        )
    return f"FAIL {result['id']}  " + "; ".join(result["mismatches"])


def _metric_text(value: Any) -> str:
    if value is None:
        return "n/a"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def eval_command(paths: list[str], json_path: str | None, out: TextIO, err: TextIO) -> int:
    """``superbiz eval PATH... [--json FILE]``: run scenarios and print one line each.

    Prints one line per scenario, a metrics line, and ``N passed, N failed`` last; writes the
    per-scenario results with totals and metrics to ``json_path`` when given.

    Returns:
        0 when every scenario passed, 1 when any failed, 2 when a path does not exist, no
        scenario file was found, or the JSON report cannot be written.
    """
    if not paths:
        err.write("superbiz eval: give at least one scenario file or folder\n")
        return 2
    try:
        loaded = _load_all(paths)
    except FileNotFoundError as exc:
        err.write(f"superbiz eval: {exc}\n")
        return 2
    if not loaded:
        err.write(f"superbiz eval: no scenario files (*.json) found in {', '.join(paths)}\n")
        return 2
    results = _run_loaded(loaded)
    scenarios = [scenario for _, scenario, _ in loaded if scenario is not None]
    expects = {s["id"]: s.get("expect") or {} for s in scenarios}
    for result in results:
        out.write(_line(result, expects.get(result["id"], {})) + "\n")
    metrics = summarize(results, scenarios)
    out.write(
        "metrics: "
        + " ".join(
            f"{key}={_metric_text(metrics[key])}"
            for key in (
                "verdict_accuracy",
                "routing_accuracy",
                "leak_count",
                "false_reject_count",
                "unbound_specifics_false_positives",
            )
        )
        + "\n"
    )
    out.write(f"{metrics['passed']} passed, {metrics['failed']} failed\n")
    if json_path is not None:
        report = {
            "scenarios": results,
            "totals": {
                "passed": metrics["passed"],
                "failed": metrics["failed"],
                "total": metrics["total"],
            },
            "metrics": {k: v for k, v in metrics.items() if k not in ("passed", "failed", "total")},
        }
        try:
            Path(json_path).write_text(
                json.dumps(report, ensure_ascii=False, indent=2) + "\n", encoding="utf-8"
            )
        except OSError as exc:
            err.write(f"superbiz eval: cannot write {json_path}: {exc}\n")
            return 2
    return 1 if metrics["failed"] else 0
