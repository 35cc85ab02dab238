"""Snapshots of the compiled graph: its Mermaid drawing and its input, output and context schemas.

The snapshots live in tests/snapshots/ and are committed. A deliberate change is recorded by
running the tests with SUPERBIZ_UPDATE_SNAPSHOTS=1 (refused where CI is set) and committing the
rewritten files; otherwise a difference fails with a diff.
"""

from __future__ import annotations

import difflib
import json
import os
import warnings
from pathlib import Path
from typing import Any

import pytest

from graph.builder import build_graph

SNAPSHOTS = Path(__file__).parent / "snapshots"
ROOT = Path(__file__).resolve().parents[1]
UPDATE_ENV = "SUPERBIZ_UPDATE_SNAPSHOTS"
REGENERATE = f"{UPDATE_ENV}=1 .venv/bin/pytest tests/test_graph_schema.py"


def shown(path: Path) -> str:
    """`path` relative to the repository when it is inside it."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def assert_matches_snapshot(actual: str, path: Path) -> None:
    """Fail with a unified diff when `actual` differs from the snapshot file at `path`.

    With SUPERBIZ_UPDATE_SNAPSHOTS=1 the file is rewritten instead (with a warning), except
    where the CI variable is set: there a snapshot is only ever compared.
    """
    if os.environ.get(UPDATE_ENV) == "1":
        if os.environ.get("CI"):
            pytest.fail(
                f"{UPDATE_ENV}=1 is refused in CI; regenerate {shown(path)} locally and commit it",
                pytrace=False,
            )
        if not path.exists() or path.read_text(encoding="utf-8") != actual:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(actual, encoding="utf-8")
            warnings.warn(f"rewrote snapshot {shown(path)}", UserWarning, stacklevel=2)
        return
    if not path.exists():
        pytest.fail(
            f"snapshot {shown(path)} is missing; write it with {REGENERATE} and commit it",
            pytrace=False,
        )
    expected = path.read_text(encoding="utf-8")
    if actual != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True),
                actual.splitlines(keepends=True),
                fromfile=f"{shown(path)} (committed)",
                tofile="current code",
            )
        )
        pytest.fail(
            f"{shown(path)} differs from the current code:\n{diff}\n"
            f"If the change is intended, regenerate it with {REGENERATE} and commit it.",
            pytrace=False,
        )


def json_text(schema: dict[str, Any] | None) -> str:
    """A JSON schema as stable, diff-friendly text."""
    assert schema is not None
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


# --------------------------------------------------------------------------- the graph


def test_graph_mermaid_matches_snapshot() -> None:
    drawing = build_graph().compile().get_graph().draw_mermaid()

    assert_matches_snapshot(drawing.rstrip("\n") + "\n", SNAPSHOTS / "graph.mmd")


@pytest.mark.parametrize("kind", ["input", "output", "context"])
def test_graph_json_schema_matches_snapshot(kind: str) -> None:
    compiled = build_graph().compile()
    schema = {
        "input": compiled.get_input_jsonschema,
        "output": compiled.get_output_jsonschema,
        "context": compiled.get_context_jsonschema,
    }[kind]()

    assert_matches_snapshot(json_text(schema), SNAPSHOTS / f"{kind}_schema.json")


# --------------------------------------------------------------------------- the comparison

COMMITTED = "graph TD;\n\tintake --> planner;\n"
CHANGED = "graph TD;\n\tintake --> executor;\n"


@pytest.fixture
def snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A committed snapshot file, compared (not updated) unless a test sets the variables."""
    monkeypatch.delenv(UPDATE_ENV, raising=False)
    monkeypatch.delenv("CI", raising=False)
    path = tmp_path / "drawing.mmd"
    path.write_text(COMMITTED, encoding="utf-8")
    return path


def test_graph_snapshot_difference_fails_with_a_diff_and_how_to_regenerate(
    snapshot: Path,
) -> None:
    with pytest.raises(pytest.fail.Exception) as failure:
        assert_matches_snapshot(CHANGED, snapshot)

    message = str(failure.value)
    assert "-\tintake --> planner;" in message
    assert "+\tintake --> executor;" in message
    assert REGENERATE in message
    assert snapshot.read_text(encoding="utf-8") == COMMITTED


def test_graph_snapshot_missing_fails_without_writing_it(snapshot: Path) -> None:
    missing = snapshot.with_name("missing.mmd")

    with pytest.raises(pytest.fail.Exception, match="is missing"):
        assert_matches_snapshot(CHANGED, missing)

    assert not missing.exists()


def test_graph_snapshot_update_rewrites_the_file(
    snapshot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(UPDATE_ENV, "1")

    with pytest.warns(UserWarning, match="rewrote snapshot"):
        assert_matches_snapshot(CHANGED, snapshot)

    assert snapshot.read_text(encoding="utf-8") == CHANGED


def test_graph_snapshot_update_is_refused_in_ci(
    snapshot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(UPDATE_ENV, "1")
    monkeypatch.setenv("CI", "true")

    with pytest.raises(pytest.fail.Exception, match="refused in CI"):
        assert_matches_snapshot(CHANGED, snapshot)

    assert snapshot.read_text(encoding="utf-8") == COMMITTED
