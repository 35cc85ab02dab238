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
