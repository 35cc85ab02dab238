"""The compiled, checkpointer-free graph that ``langgraph.json`` serves."""

from __future__ import annotations

from graph.builder import build_graph

graph = build_graph().compile(name="superbiz")
