"""The wiring of the diagnosis graph, so accidental rewiring is caught."""

from __future__ import annotations

import json
from pathlib import Path

from apps.langgraph_server.server import graph
from graph.builder import NODES, build_graph
from graph.routing import after_executor, after_verifier
from nodes.composer import composer_section

EXPECTED_EDGES = {
    ("__start__", "intake", False),
    ("intake", "planner", False),
    ("planner", "executor", False),
    ("executor", "tools", True),
    ("executor", "evidence", True),
    ("tools", "executor", False),
    ("evidence", "gatekeeper", False),
    ("gatekeeper", "verifier", False),
    ("verifier", "composer", True),
    ("verifier", "retry", True),
    ("retry", "planner", False),
    ("composer", "audit", False),
    ("audit", "__end__", False),
}


def test_graph_topology_has_every_role_node() -> None:
    drawn = graph.get_graph()
    assert set(drawn.nodes) == {"__start__", "__end__", *NODES}


def test_graph_topology_edges_match_the_flow_contract() -> None:
    drawn = graph.get_graph()
    edges = {(e.source, e.target, bool(e.conditional)) for e in drawn.edges}
    assert edges == EXPECTED_EDGES


def test_graph_builder_is_uncompiled_and_export_has_no_checkpointer() -> None:
    builder = build_graph()
    assert not hasattr(builder, "invoke")
    assert graph.checkpointer is None


def test_graph_langgraph_json_points_at_the_export() -> None:
    config = json.loads(Path(__file__).resolve().parents[1].joinpath("langgraph.json").read_text())
    assert config["graphs"]["superbiz"] == "./apps/langgraph_server/server.py:graph"


def test_routing_routers_are_typed_with_their_targets() -> None:
    assert "Literal['tools', 'evidence']" in str(after_executor.__annotations__["return"])
    assert "Literal['composer', 'retry']" in str(after_verifier.__annotations__["return"])


def test_composer_section_per_verdict() -> None:
    assert composer_section("PASS") == "pass"
    assert composer_section("LOW_CONFID") == "uncertain"
    assert composer_section("REJECT") == "degraded"
    assert composer_section(None) == "degraded"
