"""The packages import along the layering only, so a reader can follow data upwards and nothing
low knows the wiring:

    state < persistence < tools < knowledge < analysis < evidence, verification < models < nodes
    < graph < apps

``evidence`` (the sources) and ``verification`` (the deterministic checks) sit side by side:
neither imports the other."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

LAYERS: tuple[tuple[str, ...], ...] = (
    ("state",),
    ("persistence",),
    ("tools",),
    ("knowledge",),
    ("analysis",),
    ("evidence", "verification"),
    ("models",),
    ("nodes",),
    ("graph",),
    ("apps",),
)
"""Bottom to top; packages on one line do not import each other."""

ALLOWED: dict[str, set[str]] = {
    package: {lower for below in LAYERS[:level] for lower in below}
    for level, layer in enumerate(LAYERS)
    for package in layer
}


def _imported_packages(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            found.add("<relative>")
    return found & (set(ALLOWED) | {"<relative>"})


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_layering_package_imports_only_lower_layers(package: str) -> None:
    wrong = {
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sorted((ROOT / package).rglob("*.py"))
        for name in _imported_packages(path) - ALLOWED[package] - {package}
    }
    assert not wrong, "imports against the layering: " + "; ".join(sorted(wrong))


NODE_SUPPORT = {"nodes.common", "nodes.executor_context", "nodes.prompts"}
"""Modules of ``nodes`` that are no node: what several nodes share (the node protocol and run
helpers, what the executor's model reads of the conversation, the prompt files)."""


def _module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _node_modules() -> dict[str, Path]:
    return {
        _module_of(path): path
        for path in sorted((ROOT / "nodes").rglob("*.py"))
        if _module_of(path) != "nodes"
        and not any(_module_of(path).startswith(support) for support in NODE_SUPPORT)
    }


def _imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_layering_every_node_module_builds_a_node() -> None:
    """What is not a shared support module is a node: it defines a ``make_*`` factory."""
    modules = _node_modules()
    assert {"nodes.executor", "nodes.verifier", "nodes.tool_calls"} <= set(modules)
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        factories = [
            node.name
            for node in tree.body
            if isinstance(node, ast.FunctionDef) and node.name.startswith("make_")
        ]
        assert factories, f"{name} builds no node; a shared helper belongs elsewhere"


@pytest.mark.parametrize("module", sorted(_node_modules()))
def test_layering_no_node_module_imports_another(module: str) -> None:
    nodes = set(_node_modules())
    imported = _imported_modules(_node_modules()[module])
    wrong = sorted(name for name in imported if name in nodes and name != module)
    assert not wrong, f"{module} imports the node module(s) {', '.join(wrong)}"


@pytest.mark.parametrize("module", sorted(NODE_SUPPORT))
def test_layering_node_support_modules_import_no_node(module: str) -> None:
    paths = [
        path
        for path in sorted((ROOT / "nodes").rglob("*.py"))
        if _module_of(path).startswith(module)
    ]
    assert paths
    nodes = set(_node_modules())
    wrong = sorted(name for path in paths for name in _imported_modules(path) if name in nodes)
    assert not wrong, f"{module} imports the node module(s) {', '.join(wrong)}"
