"""Re-verification goes through ``decide`` only, with the run's rule catalog and Verifier input.

A re-check of a stored diagnosis builds the Verifier's input as the graph node does
(``nodes.verifier.verifier_input``), on the Gatekeeper rule catalog the run used (kept with the
diagnosis), and its verdict is ``verification.verdict.decide``'s on those inputs: no other
module ranks verdicts or caps one.
"""

from __future__ import annotations

import ast
import copy
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from graph.reverify import NotReverifiable, Report, reverify
from models.factory import make_model_factory
from models.messages import message_text
from models.offline import OfflineVerifier
from models.scripted import scripted_models
from nodes.verifier import verifier_input
from state.context import Context
from state.records import Catalog, Decision, VerifierInput, VerifierMode
from tests.records import binding, claim
from tests.scenario_kit import (
    ERROR_LOGS_CALL,
    Run,
    check,
    environment,
    executor_answer,
    final,
    recording_models,
    run_diagnosis,
    stored_evaluation,
    stored_record,
    verifier_reply,
)
from verification.catalog import DEFAULT_RULE_SET_VERSION, RAW_PATH, load_catalog, settings_for
from verification.executor_output import read_answer
from verification.gatekeeper import gatekeep
from verification.trace_summary import build_trace_summary
from verification.verdict import decide, is_looser
from verification.verifier_payload import build_payload, render_payload
from verification.verifier_reply import parse_verifier_reply, read_verifier_reply

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = (
    "analysis apps evidence graph knowledge models nodes persistence state tools verification"
).split()

C1 = claim(
    "c1",
    "order-service logged HTTP 500 errors",
    binding("inv-1", "logs[0]", "HTTP 500 Cannot acquire connection"),
)
C2 = claim(
    "c2",
    "order-service instance order-2 logged Cannot acquire connection from pool",
    binding("inv-1", "logs[1]", "Cannot acquire connection from pool"),
)
BAD_PATH = claim(
    "c1",
    "order-service logged HTTP 500 errors",
    binding("inv-1", "logs[99]", "HTTP 500 Cannot acquire connection"),
)
BOTH_DIRECT = verifier_reply(
    "PASS", check("c1", "direct_observation"), check("c2", "direct_observation")
)


def _diagnose(answer: str, reply: str, catalog: Catalog | None = None) -> Run:
    return run_diagnosis(
        environment(),
        {
            "planner": ["query the logs"],
            "executor": [ERROR_LOGS_CALL, final(answer)],
            "verifier": [reply],
        },
        gatekeeper_catalog=catalog,
    )


def _reverify(run: Run, reply: str | None = None) -> Report:
    """Re-check the run's diagnosis with a scripted Verifier reply, or offline without one."""
    if reply is None:
        get_model, context = make_model_factory(), Context(offline=True)
    else:
        get_model, context = scripted_models({"verifier": [reply]}), Context(offline=False)
    return reverify(
        run.state["diagnosis_id"],
        audit=run.audit,
        ledger=run.ledger,
        get_model=get_model,
        context=context,
    )


def _recorded_input(run: Run) -> tuple[VerifierInput, list[str]]:
    """The Verifier input of the stored diagnosis, built here from its record and ledger."""
    diagnosis_id = run.state["diagnosis_id"]
    record = stored_record(run.audit, diagnosis_id)
    evaluation = stored_evaluation(run.audit, diagnosis_id)
    settings = settings_for(evaluation.get("gatekeeper_catalog"))
    invocations = run.ledger.list(diagnosis_id)
    parse_status = evaluation["executor_output_parse_status"]
    structured = evaluation["executor_structured_output"]
    answer = read_answer(parse_status, structured, settings.schema)
    services = sorted(
        {str(i["arguments"]["service"]) for i in invocations if i["arguments"].get("service")}
    )
    inputs = verifier_input(
        question=record["question"],
        round=record["rounds"],
        final_answer=evaluation["executor_final_answer"],
        parse_status=parse_status,
        structured_output=structured,
        answer=answer,
        gatekeeper_result=gatekeep(answer, invocations, settings),
        trace_summary=build_trace_summary(invocations),
        retry_context=evaluation["retry_context"],
        not_run=evaluation.get("question_coverage", {}).get("not_run", []),
    )
    return inputs, services


def _decided(
    inputs: VerifierInput,
    services: list[str],
    reply_text: str,
    mode: VerifierMode,
    recheck_of: VerifierMode | None,
) -> Decision:
    data, _, _ = parse_verifier_reply(reply_text)
    assert data is not None
    return decide(
        inputs["answer"],
        inputs["gatekeeper_result"],
        read_verifier_reply(data),
        parse_status=inputs["parse_status"],
        trace=inputs["trace_summary"],
        mode=mode,
        question=inputs["question"],
        known_services=services,
        not_run=inputs.get("not_run", []),
        recheck_of=recheck_of,
    )


def _same(report: Report, decision: Decision) -> None:
    result: dict[str, Any] = dict(report["verifier_result"])
    assert {key: result[key] for key in decision} == decision


def test_reverify_is_decide_on_the_recorded_inputs_with_a_model_reply() -> None:
    run = _diagnose(executor_answer(C1, C2), BOTH_DIRECT)
    again = verifier_reply(
        "PASS", check("c1", "direct_observation"), check("c2", "reasonable_inference")
    )

    report = _reverify(run, again)

    inputs, services = _recorded_input(run)
    _same(report, _decided(inputs, services, again, "model", "model"))
    assert report["after"]["labels"] == {"c1": "direct_observation", "c2": "reasonable_inference"}


def test_reverify_offline_recheck_of_a_model_verdict_is_decide_with_its_cap() -> None:
    """The claim checker re-checking a model's REJECT is capped at LOW_CONFID by ``decide``."""
    run = _diagnose(
        executor_answer(C1), verifier_reply("REJECT", check("c1", "contradicted"), score=0.0)
    )
    assert run.state["verdict"] == "REJECT"

    report = _reverify(run)

    inputs, services = _recorded_input(run)
    offline = OfflineVerifier().invoke([HumanMessage(render_payload(build_payload(inputs)))])
    decision = _decided(inputs, services, message_text(offline), "offline", "model")
    _same(report, decision)
    assert decision["verdict"] == "LOW_CONFID"
    assert decision["derived_verdict"] == "PASS"  # the cap, not the labels, holds it back
    assert decision["notes"][-1] == (
        "re-checked by the deterministic claim checker: at most LOW_CONFID"
    )
    assert report["loosened"] and report["changes"][0].startswith("the re-check is LOOSER")


def test_reverify_builds_the_verifier_input_the_node_built() -> None:
    """The re-check's Verifier reads exactly what the graph's Verifier read."""
    run = _diagnose(executor_answer(C1, C2), BOTH_DIRECT)
    get_model, models = recording_models({"verifier": [BOTH_DIRECT]})

    report = reverify(
        run.state["diagnosis_id"],
        audit=run.audit,
        ledger=run.ledger,
        get_model=get_model,
        context=Context(offline=False),
    )

    node_saw = [message_text(m) for m in run.models["verifier"].calls[0]]
    recheck_saw = [message_text(m) for m in models["verifier"].calls[0]]
    assert recheck_saw == node_saw
    assert report["changes"] == []


def _custom_catalog() -> Catalog:
    """The bundled catalog, renamed, with a wrong raw path only lowering the confidence."""
    catalog = copy.deepcopy(load_catalog())
    catalog["rule_set_version"] = "custom-rules.v9"
    for rule in catalog["rules"]:
        if rule["id"] == RAW_PATH:
            rule["default_severity"] = "low_confid"
    return catalog


def test_reverify_uses_the_rule_catalog_the_run_used() -> None:
    run = _diagnose(executor_answer(BAD_PATH, C2), BOTH_DIRECT, _custom_catalog())
    assert run.state["verdict"] == "LOW_CONFID"  # the custom catalog: raw path -> low_confid
    evaluation = stored_evaluation(run.audit, run.state["diagnosis_id"])
    assert evaluation.get("gatekeeper_catalog") == _custom_catalog()

    report = _reverify(run, BOTH_DIRECT)

    assert report["after"]["verdict"] == "LOW_CONFID"
    assert report["after"]["rule_set_version"] == "custom-rules.v9"
    assert report["changes"] == []


def test_reverify_of_a_record_without_its_catalog_uses_the_bundled_one() -> None:
    run = _diagnose(executor_answer(BAD_PATH, C2), BOTH_DIRECT, _custom_catalog())
    diagnosis_id = run.state["diagnosis_id"]
    evaluation = stored_evaluation(run.audit, diagnosis_id)
    evaluation.pop("gatekeeper_catalog")  # as recorded before the catalog was kept
    run.audit.update_channel(diagnosis_id, "verifier_evaluation", evaluation)

    report = _reverify(run, BOTH_DIRECT)

    assert report["after"]["rule_set_version"] == DEFAULT_RULE_SET_VERSION
    assert report["after"]["verdict"] == "REJECT"  # bundled: a wrong raw path rejects
    assert "verdict: 'LOW_CONFID' -> 'REJECT'" in report["changes"]


def test_reverify_refuses_a_recorded_catalog_it_cannot_use() -> None:
    run = _diagnose(executor_answer(C1, C2), BOTH_DIRECT)
    diagnosis_id = run.state["diagnosis_id"]
    evaluation = stored_evaluation(run.audit, diagnosis_id)
    evaluation["gatekeeper_catalog"] = Catalog(rule_set_version="broken.v1", rules=[])
    run.audit.update_channel(diagnosis_id, "verifier_evaluation", evaluation)

    with pytest.raises(NotReverifiable, match="its recorded rule catalog"):
        _reverify(run, BOTH_DIRECT)


@pytest.mark.parametrize(
    ("verdict", "than", "looser"),
    [
        ("PASS", "LOW_CONFID", True),
        ("LOW_CONFID", "REJECT", True),
        ("REJECT", "PASS", False),
        ("PASS", "PASS", False),
        (None, "REJECT", False),
        ("PASS", None, False),
        ("PASS", "UNKNOWN", False),
    ],
)
def test_is_looser_ranks_verdicts(verdict: str | None, than: str | None, looser: bool) -> None:
    assert is_looser(verdict, than) is looser


# --------------------------------------------------------------------------- one home


def _product_files() -> list[Path]:
    return [path for package in PRODUCT for path in sorted((ROOT / package).rglob("*.py"))]


VERDICTS = {"PASS", "LOW_CONFID", "REJECT"}


def _ranks_verdicts(node: ast.AST) -> bool:
    """A table giving verdicts numbers: ``{"REJECT": 0, "LOW_CONFID": 1, ...}``."""
    if not isinstance(node, ast.Dict):
        return False
    keys = {k.value for k in node.keys if isinstance(k, ast.Constant) and k.value in VERDICTS}
    numbers = all(isinstance(v, ast.Constant) and isinstance(v.value, int) for v in node.values)
    return len(keys) >= 2 and numbers


def _calls(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Call) and (
        (isinstance(node.func, ast.Name) and node.func.id == name)
        or (isinstance(node.func, ast.Attribute) and node.func.attr == name)
    )


def test_only_the_verdict_module_ranks_or_caps_verdicts() -> None:
    home = ROOT / "verification" / "verdict.py"
    found: list[str] = []
    for path in _product_files():
        if path == home:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if _ranks_verdicts(node) or _calls(node, "strictest"):
                found.append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}")
    assert not found, "verdicts ranked or capped outside decide: " + ", ".join(found)
    home_tree = ast.parse(home.read_text(encoding="utf-8"))
    assert any(_ranks_verdicts(node) for node in ast.walk(home_tree))


def test_one_builder_of_the_verifier_input() -> None:
    builder = ROOT / "nodes" / "verifier.py"
    found = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in _product_files()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and _calls(node, "VerifierInput")
    ]
    assert found and all(where.startswith(str(builder.relative_to(ROOT))) for where in found)
    assert len(found) == 1, found
