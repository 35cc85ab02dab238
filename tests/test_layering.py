"""The packages import along the layering only (state < persistence < tools < verification <
nodes < graph < apps), so a reader can follow data upwards and nothing low knows the wiring."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

ALLOWED: dict[str, set[str]] = {
    "state": set(),
    "persistence": {"state"},
    "tools": {"state", "persistence"},
    "verification": {"state", "tools"},
    "nodes": {"state", "persistence", "tools", "verification"},
    "graph": {"state", "persistence", "tools", "verification", "nodes"},
    "apps": {"state", "persistence", "tools", "verification", "nodes", "graph"},
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
