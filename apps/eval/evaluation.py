"""Scenario evaluation (docs/contracts.md §9): drive the real graph with scripted model replies.

``run_scenario`` builds the real graph around a scenario (``apps.eval.scenario``: its question, its
environment served by the sample backend and the scripted replies of every model role, or the
offline rules for an offline scenario), runs one diagnosis and compares the final state with the
scenario's ``expect``; ``eval_command`` is what
``superbiz eval PATH... [--json FILE]`` runs. The graph is checkpointed in memory unless a run is
given another checkpointer.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TextIO, TypeAlias

from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from typing_extensions import TypedDict

from apps.eval.scenario import (
    ExecutorStep,
    Expect,
    Reply,
    Scenario,
    ScenarioError,
    load_scenario,
    validate_scenario,
)
from evidence.environment import Environment
from evidence.replay import ReplayBackend
from evidence.sample import SampleBackend
from graph.compile import RunStores, compile_graph
from graph.runner import Graph, state_of, summary_of
from models.budget import GetModel
from models.factory import make_model_factory
from models.recording import confirmed_claims as recorded_confirmed_claims
from models.scripted import ScriptedChatModel, ScriptExhausted, scripted_models
from state.context import Context
from state.graph_state import DiagnosisState
from state.records import CoverageStatus, GatekeeperBrief, Verdict
from tools.backend import EvidenceBackend

SCORE_TOLERANCE = 0.001
"""How far the groundedness score may be from the expected one."""

UNBOUND_SPECIFICS = "evidence.unbound_specifics"

_EXHAUSTED_ROLE = re.compile(r"no (?:more )?(\w+) replies")

ScriptedReply: TypeAlias = Reply | ExecutorStep
"""What a scripted model replays: a reply, or for the executor a step."""

Checkpointer: TypeAlias = BaseCheckpointSaver[str]
"""What the graph of a run is compiled with."""


class CoverageBrief(TypedDict):
    """The question coverage of a run's final round, in a scenario result."""

    status: CoverageStatus
    asked: list[str]
    unanswered: list[str]
    not_run: list[str]


class ScenarioResult(TypedDict):
    """The outcome of one scenario (a ``superbiz eval --json`` report holds one per scenario).

    ``ok`` is true when nothing mismatched and nothing failed; ``mismatches`` are readable
    differences from ``expect``; ``error`` says why the scenario could not run to the end.
    """

    id: str
    ok: bool
    verdict: str | None
    model_verdict: Verdict | None
    rounds: int | None
    route: list[str]
    gatekeeper: GatekeeperBrief
    groundedness_score: float | None
    confirmed_claims: list[str]
    question_coverage: CoverageBrief | None
    root_cause_service: str | None
    answer: str
    mismatches: list[str]
    error: str | None


class Metrics(TypedDict):
    """Corpus metrics (see ``summarize``)."""

    passed: int
    failed: int
    total: int
    verdict_accuracy: float | None
    routing_accuracy: float | None
    leak_count: int
    false_reject_count: int
    unbound_specifics_false_positives: int
    coverage_accuracy: float | None
    partial_count: int
    unanswered_count: int


_Loaded: TypeAlias = tuple[Path, Scenario | None, str | None]
"""A scenario file with its scenario, or the reason it is not valid."""


# --------------------------------------------------------------------------- running


def script_replies(scenario: Scenario) -> dict[str, list[ScriptedReply]]:
    """The scripted replies of each role, in the order the graph asks for them."""
    if "script" not in scenario:
        return {}
    script = scenario["script"]
    replies: dict[str, list[ScriptedReply]] = {"planner": [], "executor": [], "verifier": []}
    for item in script["rounds"]:
        replies["planner"].append(item["planner"])
        replies["executor"].extend(item["executor"])
        replies["verifier"].extend(item["verifier"])
    if "composer" in script:
        replies["composer"] = [script["composer"]]
    return replies


def _no_gatekeeper() -> GatekeeperBrief:
    return GatekeeperBrief(status=None, severity=None, failed_rules=[])


def _empty_result(scenario_id: str) -> ScenarioResult:
    return ScenarioResult(
        id=scenario_id,
        ok=False,
        verdict=None,
        model_verdict=None,
        rounds=None,
        route=[],
        gatekeeper=_no_gatekeeper(),
        groundedness_score=None,
        confirmed_claims=[],
        root_cause_service=None,
        question_coverage=None,
        answer="",
        mismatches=[],
        error=None,
    )


def confirmed_claims(state: DiagnosisState) -> list[str]:
    """Final-round claim ids the answer presents as established (``models.recording``)."""
    return recorded_confirmed_claims(state)


def _fill(result: ScenarioResult, state: DiagnosisState) -> None:
    summary = summary_of(state, "-") if "run_info" in state else None
    result["verdict"] = state.get("verdict") or None
    result["model_verdict"] = summary["model_verdict"] if summary else None
    result["rounds"] = state.get("round")
    result["route"] = list(state.get("route", []))
    result["gatekeeper"] = GatekeeperBrief(**summary["gatekeeper"]) if summary else _no_gatekeeper()
    result["groundedness_score"] = (
        state["verifier_result"]["groundedness_score"] if "verifier_result" in state else None
    )
    result["confirmed_claims"] = confirmed_claims(state)
    coverage = (
        state["verifier_result"].get("question_coverage") if "verifier_result" in state else None
    )
    result["question_coverage"] = (
        None
        if coverage is None
        else CoverageBrief(
            status=coverage["status"],
            asked=list(coverage["asked"]),
            unanswered=list(coverage["unanswered"]),
            not_run=list(coverage["not_run"]),
        )
    )
    root = state.get("root_cause")
    result["root_cause_service"] = root["service"] if root else None
    result["answer"] = state.get("answer", "")


def _show(values: Iterable[object]) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"


def _set_mismatch(name: str, expected: Iterable[str], actual: Iterable[str]) -> list[str]:
    """``name: expected [..] got [..]`` when the two differ as sets, else nothing."""
    wanted, got = set(expected), set(actual)
    if wanted == got:
        return []
    return [f"{name}: expected {_show(sorted(wanted))} got {_show(sorted(got))}"]


_PlainKey: TypeAlias = Literal[
    "verdict", "model_verdict", "rounds", "gatekeeper_status", "gatekeeper_severity"
]
"""``expect`` keys compared by equality."""
_SetKey: TypeAlias = Literal["gatekeeper_failed_rules", "confirmed_claims"]
"""``expect`` keys compared as sets."""


def compare(expect: Expect, result: ScenarioResult) -> list[str]:
    """Readable differences between ``expect`` and a run's result (empty when all match)."""
    problems: list[str] = []
    gatekeeper = result["gatekeeper"]
    plain: tuple[tuple[_PlainKey, object], ...] = (
        ("verdict", result["verdict"]),
        ("model_verdict", result["model_verdict"]),
        ("rounds", result["rounds"]),
        ("gatekeeper_status", gatekeeper["status"]),
        ("gatekeeper_severity", gatekeeper["severity"]),
    )
    for key, actual in plain:
        if key in expect and expect[key] != actual:
            problems.append(f"{key}: expected {expect[key]} got {actual}")
    if "root_cause_service" in expect and expect["root_cause_service"] != (
        actual_root := result["root_cause_service"]
    ):
        problems.append(
            f"root_cause_service: expected {expect['root_cause_service']} got {actual_root}"
        )
    if "route" in expect and expect["route"] != result["route"]:
        problems.append(
            f"route: expected {' > '.join(expect['route'])} got {' > '.join(result['route'])}"
        )
    sets: tuple[tuple[_SetKey, list[str]], ...] = (
        ("gatekeeper_failed_rules", list(gatekeeper["failed_rules"])),
        ("confirmed_claims", result["confirmed_claims"]),
    )
    for set_key, actual_list in sets:
        if set_key in expect:
            problems += _set_mismatch(set_key, expect[set_key], actual_list)
    if "groundedness_score" in expect:
        score = result["groundedness_score"]
        if score is None or abs(score - expect["groundedness_score"]) > SCORE_TOLERANCE:
            problems.append(
                f"groundedness_score: expected {expect['groundedness_score']} got {score}"
            )
    problems += _coverage_mismatches(expect, result)
    answer = result["answer"]
    for text in expect.get("answer_contains", []):
        if text not in answer:
            problems.append(f"answer does not contain {text!r}")
    for text in expect.get("answer_not_contains", []):
        if text in answer:
            problems.append(f"answer contains {text!r}, which must never be presented")
    return problems


def _coverage_mismatches(expect: Expect, result: ScenarioResult) -> list[str]:
    """How a run's question coverage differs from the expected one."""
    if "question_coverage" not in expect:
        return []
    wanted = expect["question_coverage"]
    actual = result["question_coverage"]
    if actual is None:
        return ["question_coverage: expected one, the run decided none"]
    problems = []
    if "status" in wanted and wanted["status"] != actual["status"]:
        problems.append(f"question_coverage: expected {wanted['status']} got {actual['status']}")
    lists: tuple[tuple[Literal["asked", "unanswered"], list[str]], ...] = (
        ("asked", actual["asked"]),
        ("unanswered", actual["unanswered"]),
    )
    for key, got in lists:
        if key in wanted:
            problems += _set_mismatch(f"question_coverage.{key}", wanted[key], got)
    return problems


def _unused_replies(get_model: GetModel, roles: Iterable[str], ctx: Context) -> list[str]:
    """One mismatch per role whose scripted replies were not all used."""
    problems = []
    for role in roles:
        model = get_model(role, ctx)
        remaining = len(list(model.messages)) if isinstance(model, ScriptedChatModel) else 0
        if remaining:
            plural = "reply" if remaining == 1 else "replies"
            problems.append(f"script has {remaining} unused {role} {plural}")
    return problems


@dataclass
class _Prepared:
    """A compiled graph wired to a scenario's scripted models and environment."""

    scenario: Scenario
    app: Graph
    config: RunnableConfig
    context: Context
    get_model: GetModel
    roles: list[str]

    def invoke(self) -> DiagnosisState:
        self.app.invoke(
            {"messages": [HumanMessage(self.scenario["question"])]},
            config=self.config,
            context=self.context,
        )
        return self.state()

    def state(self) -> DiagnosisState:
        return state_of(self.app, self.config)


def _prepare(scenario: Scenario, checkpointer: Checkpointer | None) -> _Prepared:
    scenario_id = str(scenario.get("id") or "?")
    checked = validate_scenario(scenario, origin=scenario_id)
    replies = script_replies(checked)
    offline = bool(checked.get("offline"))
    get_model = make_model_factory() if offline else scripted_models(replies)
    context = Context(
        offline=offline,
        language=checked["language"],
        composer_mode="model" if "composer" in replies else "template",
    )
    if "max_tool_calls" in checked:
        context = dataclasses.replace(context, max_tool_calls_per_round=checked["max_tool_calls"])
    app = compile_graph(
        RunStores(checkpointer=InMemorySaver() if checkpointer is None else checkpointer),
        evaluation_backend(checked["environment"]),
        get_model=get_model,
    )
    config: RunnableConfig = {"configurable": {"thread_id": f"eval-{scenario_id}"}}
    return _Prepared(checked, app, config, context, get_model, list(replies))


def evaluation_backend(environment: Environment) -> EvidenceBackend:
    """What serves a scenario's tool calls: a replay's recorded calls, else the sample backend."""
    if "replay" in environment:
        return ReplayBackend(environment["replay"])
    return SampleBackend(environment)


def run_graph(scenario: Scenario, checkpointer: Checkpointer | None = None) -> DiagnosisState:
    """Run a scenario's diagnosis and return the graph's full final state (no comparison).

    Args:
        scenario: A scenario as returned by ``load_scenario`` (it is checked again).
        checkpointer: What to compile the graph with; a fresh ``InMemorySaver`` when omitted.

    Returns:
        The state the graph's nodes wrote, as its last checkpoint holds it.

    Raises:
        ScenarioError: The scenario is not valid.
        ScriptExhausted: A role ran out of scripted replies.
    """
    return _prepare(scenario, checkpointer).invoke()


def run_scenario(scenario: Scenario, checkpointer: Checkpointer | None = None) -> ScenarioResult:
    """Run one scenario through the real graph and compare the outcome with its ``expect``.

    Never raises for a problem of the scenario or the product: a script that runs out of replies
    gives the mismatch ``script ran out of <role> replies``, any other exception is reported in
    ``error`` (and as a mismatch), and scripted replies left unused are mismatches too.

    Args:
        scenario: A scenario as returned by ``load_scenario`` (it is checked again).
        checkpointer: What to compile the graph with; a fresh ``InMemorySaver`` when omitted (as
            ``superbiz eval`` runs). Each scenario runs on the thread ``eval-<id>``.

    Returns:
        The result; ``ok`` is true when nothing mismatched and nothing failed.
    """
    result = _empty_result(str(scenario.get("id") or "?"))
    prepared: _Prepared | None = None
    try:
        prepared = _prepare(scenario, checkpointer)
        _fill(result, prepared.invoke())
        mismatches = compare(prepared.scenario["expect"], result)
        mismatches.extend(_unused_replies(prepared.get_model, prepared.roles, prepared.context))
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


def _fill_partial(result: ScenarioResult, prepared: _Prepared | None) -> None:
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


def _load_all(paths: Sequence[str | Path]) -> list[_Loaded]:
    loaded: list[_Loaded] = []
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


def _invalid_result(file: Path, reason: str) -> ScenarioResult:
    result = _empty_result(str(file))
    result["error"] = reason
    result["mismatches"] = [f"invalid scenario: {reason}"]
    return result


def _run_loaded(loaded: list[_Loaded]) -> list[ScenarioResult]:
    results = []
    for file, scenario, reason in loaded:
        if scenario is None:
            results.append(_invalid_result(file, reason or f"{file}: invalid scenario"))
        else:
            results.append(run_scenario(scenario))
    return results


def run_paths(paths: list[str]) -> list[ScenarioResult]:
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


def summarize(results: Sequence[ScenarioResult], scenarios: Sequence[Scenario]) -> Metrics:
    """Corpus metrics.

    Args:
        results: Results of ``run_scenario`` (or ``run_paths``).
        scenarios: The scenarios that were run; matched to results by id.

    Returns:
        ``verdict_accuracy``: fraction of scenarios with an expected verdict that got it;
        ``routing_accuracy``: fraction of scenarios with an expected route or rounds whose route
        and rounds matched (None when no scenario states one); ``leak_count``: scenarios whose
        answer contains one of their ``answer_not_contains`` texts; ``false_reject_count``:
        scenarios expected to PASS that did not; ``unbound_specifics_false_positives``:
        scenarios expected to PASS whose Gatekeeper failed ``evidence.unbound_specifics``;
        ``coverage_accuracy``: fraction of scenarios with an expected ``question_coverage``
        that got it; ``partial_count`` and ``unanswered_count``: scenarios whose final question
        coverage was partial or unanswered; and the ``passed``, ``failed`` and ``total`` counts.
    """
    expects = {scenario["id"]: scenario["expect"] for scenario in scenarios}
    verdict_total = verdict_hits = routing_total = routing_hits = 0
    leaks = false_rejects = unbound = 0
    coverage_total = coverage_hits = partial = unanswered = 0
    for result in results:
        coverage = result["question_coverage"]
        partial += coverage is not None and coverage["status"] == "partial"
        unanswered += coverage is not None and coverage["status"] == "unanswered"
        expect = expects.get(result["id"])
        if expect is None:
            continue
        if "question_coverage" in expect:
            coverage_total += 1
            coverage_hits += not _coverage_mismatches(expect, result)
        if "verdict" in expect:
            verdict_total += 1
            verdict_hits += result["verdict"] == expect["verdict"]
        if "route" in expect or "rounds" in expect:
            routing_total += 1
            routed = ("route" not in expect or expect["route"] == result["route"]) and (
                "rounds" not in expect or expect["rounds"] == result["rounds"]
            )
            routing_hits += routed
        if any(text in result["answer"] for text in expect.get("answer_not_contains", [])):
            leaks += 1
        if expect.get("verdict") == "PASS":
            false_rejects += result["verdict"] != "PASS"
            unbound += UNBOUND_SPECIFICS in result["gatekeeper"]["failed_rules"]
    passed = sum(1 for result in results if result["ok"])
    return Metrics(
        passed=passed,
        failed=len(results) - passed,
        total=len(results),
        verdict_accuracy=_fraction(verdict_hits, verdict_total),
        routing_accuracy=_fraction(routing_hits, routing_total),
        leak_count=leaks,
        false_reject_count=false_rejects,
        unbound_specifics_false_positives=unbound,
        coverage_accuracy=_fraction(coverage_hits, coverage_total),
        partial_count=partial,
        unanswered_count=unanswered,
    )


# --------------------------------------------------------------------------- command


_TOTALS = ("passed", "failed", "total")


def _line(result: ScenarioResult, expect: Expect) -> str:
    if result["ok"]:
        return (
            f"ok   {result['id']}  expected {expect.get('verdict') or '-'} "
            f"got {result['verdict'] or '-'}"
        )
    return f"FAIL {result['id']}  " + "; ".join(result["mismatches"])


def _metric_text(value: object) -> str:
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
    expects = {scenario["id"]: scenario["expect"] for scenario in scenarios}
    for result in results:
        out.write(_line(result, expects.get(result["id"], {})) + "\n")
    metrics = summarize(results, scenarios)
    rates = {key: value for key, value in metrics.items() if key not in _TOTALS}
    out.write("metrics: " + " ".join(f"{k}={_metric_text(v)}" for k, v in rates.items()) + "\n")
    out.write(f"{metrics['passed']} passed, {metrics['failed']} failed\n")
    if json_path is not None:
        report = {
            "scenarios": results,
            "totals": {key: value for key, value in metrics.items() if key in _TOTALS},
            "metrics": rates,
        }
        try:
            Path(json_path).write_text(
                json.dumps(report, ensure_ascii=False, indent=2) + "\n", encoding="utf-8"
            )
        except OSError as exc:
            err.write(f"superbiz eval: cannot write {json_path}: {exc}\n")
            return 2
    return 1 if metrics["failed"] else 0
