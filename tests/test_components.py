"""A missing component skips a test on a developer's machine and fails it in CI."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.components import REQUIRE_VARIABLE, component_unavailable
from tests.corpora import CORPUS_VARIABLE, runbook_corpus


def test_component_unavailable_skips_without_the_ci_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(REQUIRE_VARIABLE, raising=False)
    with pytest.raises(pytest.skip.Exception, match="prometheus not available: not on PATH"):
        component_unavailable("prometheus", "not on PATH")


def test_component_unavailable_fails_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(REQUIRE_VARIABLE, "1")
    with pytest.raises(pytest.fail.Exception, match="prometheus is required here"):
        component_unavailable("prometheus", "not on PATH")


def test_runbook_corpus_is_found_beside_the_checkout_or_where_the_variable_says(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(CORPUS_VARIABLE, str(tmp_path))
    monkeypatch.delenv(REQUIRE_VARIABLE, raising=False)
    with pytest.raises(pytest.skip.Exception, match="no LICENSE file"):
        runbook_corpus()
    (tmp_path / "LICENSE").write_text("Apache-2.0", encoding="utf-8")
    assert runbook_corpus() == tmp_path
