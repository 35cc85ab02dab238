"""A missing component skips a test on a developer's machine and fails it in CI."""

from __future__ import annotations

import pytest

from tests.components import REQUIRE_VARIABLE, component_unavailable


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
