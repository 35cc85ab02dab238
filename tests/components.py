"""What a test does when a real component (a server binary, a browser) is not on this machine.

On a developer's machine such a test skips, saying what to install. In CI (``.ci/run`` exports
``SUPERBIZ_REQUIRE_COMPONENTS=1``) the component must be there, so the skip becomes a failure.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

REQUIRE_VARIABLE = "SUPERBIZ_REQUIRE_COMPONENTS"


def component_unavailable(component: str, reason: str) -> NoReturn:
    """Skip the test (or fail it when components are required) because ``component`` is missing."""
    if os.environ.get(REQUIRE_VARIABLE):
        pytest.fail(f"{component} is required here ({REQUIRE_VARIABLE} is set): {reason}")
    pytest.skip(f"{component} not available: {reason}")
