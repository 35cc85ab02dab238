"""No node changes the state it is given: each works on a deep copy that must stay as it was."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda

from apps.eval.evaluation import script_replies
from apps.eval.scenario import load_scenario
from tests.scenario_kit import run_diagnosis

SCENARIOS = Path(__file__).parent / "scenarios"
ABSENT = object()


@dataclass
class NodeCall:
    """One node run: its input as given, and the same object after the node returned."""

    node: str
    before: dict[str, Any]
    after: dict[str, Any]

    def changed_keys(self) -> list[str]:
        """The state keys whose values differ between before and after."""
        keys = self.before.keys() | self.after.keys()
        return sorted(k for k in keys if self.before.get(k, ABSENT) != self.after.get(k, ABSENT))


@dataclass
class InputGuard:
    """Wraps graph nodes so that each receives a deep copy of the state, kept for comparison."""

    calls: list[NodeCall] = field(default_factory=list)

    def wrap(self, name: str, node: Runnable[Any, Any]) -> Runnable[Any, Any]:
        """`node` run on a deep copy of its input; the copy is compared after the call."""

        def guarded(state: dict[str, Any], config: RunnableConfig) -> Any:
            given = copy.deepcopy(state)
            before = copy.deepcopy(given)
            update = node.invoke(given, config)
            self.calls.append(NodeCall(name, before, given))
            return update

        return RunnableLambda(guarded, name=name)


@pytest.mark.parametrize(
    "scenario_name",
    [
        "pass-basic-zh",
        "retry-stays-low-confid-zh",
        "label-contradicted-reject-en",
        "reject-in-round-two-en",
        "composer-model-accepted-en",
    ],
    ids=["pass", "low-confid-after-retry", "reject", "reject-after-retry", "composer-model"],
)
def test_state_immutability_no_node_changes_its_input(scenario_name: str) -> None:
    scenario = load_scenario(SCENARIOS / f"{scenario_name}.json")
    replies = script_replies(scenario)
    guard = InputGuard()

    run = run_diagnosis(
        scenario["environment"],
        replies,
        question=scenario["question"],
        language=scenario["language"],
        composer_mode="model" if "composer" in replies else "template",
        wrap_nodes=guard.wrap,
    )

    expect = scenario["expect"]
    assert run.state["verdict"] == expect["verdict"]
    assert run.route == expect["route"]
    assert [call.node for call in guard.calls] == run.route  # every node ran on a copy
    for call in guard.calls:
        assert call.after == call.before, f"{call.node} changed {call.changed_keys()}"


def test_state_immutability_guard_reports_an_in_place_change() -> None:
    def appends_in_place(state: dict[str, Any]) -> dict[str, Any]:
        state["route"].append("sneaky")
        return {}

    guard = InputGuard()
    state = {"route": ["intake"], "round": 1}

    guard.wrap("sneaky", RunnableLambda(appends_in_place)).invoke(state)

    (call,) = guard.calls
    assert state == {"route": ["intake"], "round": 1}  # the node worked on a copy
    assert call.after != call.before
    assert call.changed_keys() == ["route"]
