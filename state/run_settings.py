"""The settings a diagnosis runs with, as stored with it, so a resume continues the same run.

``RunSettings`` is plain JSON: every ``Context`` field (language, offline or model mode, the model
per role, composer mode, budgets, timeouts) and where the evidence came from (``environment``,
described by the entry point: the bundled sample, an environment file, configured backends).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from typing_extensions import TypedDict

from state.context import Context

SETTINGS_VERSION = "run-settings.v1"


class RunSettings(TypedDict):
    """What ``diagnosis_session.run_settings`` holds."""

    version: str
    context: dict[str, Any]
    """Every ``Context`` field by name, as the run used it."""
    environment: dict[str, Any]
    """Where the evidence came from, e.g. ``{"kind": "sample"}`` or ``{"kind": "file",
    "path": "/abs/env.json"}``; ``{}`` when the entry point did not say."""


def run_settings(context: Context, environment: dict[str, Any] | None = None) -> RunSettings:
    """The settings of a run as stored with its diagnosis."""
    return RunSettings(
        version=SETTINGS_VERSION,
        context=dataclasses.asdict(context),
        environment=dict(environment or {}),
    )


def context_from_settings(settings: RunSettings) -> Context:
    """The ``Context`` a stored diagnosis ran with.

    Fields this version does not know are left out; fields it lacks take the current defaults.

    Raises:
        ValueError: when a stored value is not valid for this version.
    """
    names = {f.name for f in dataclasses.fields(Context)}
    return Context(**{k: v for k, v in settings.get("context", {}).items() if k in names})
