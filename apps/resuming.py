"""Resuming a stored diagnosis from any entry point: its settings, its evidence environment.

The command line (``diagnose --resume``), the HTTP API (``POST /api/diagnoses/{id}/resume``)
and the sweeper all resume the same way: the settings stored with the diagnosis
(``graph/resume.py``) and the evidence environment it ran on, recorded as ``environment`` in
those settings: ``{"kind": "sample"}`` (the bundled sample) or ``{"kind": "file", "path": ...}``
(``--env FILE``), with ``"backends": [...]`` naming the real backends configured for the run
(``evidence/config.py``; names only, never addresses or secrets). A resume needs the same backends
configured, so it continues on the same kind of evidence.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evidence.composed import configured_backend
from evidence.config import ConfigError, load_settings
from evidence.environment import EnvironmentFileError, load_environment
from graph.resume import ResumeRefused
from tools.backend import EvidenceBackend

SAMPLE: dict[str, Any] = {"kind": "sample"}


def environment_ref(path: str | None) -> dict[str, Any]:
    """How a run's evidence environment is recorded.

    The sample or the absolute file path, and the names of the real backends configured.

    Raises:
        ConfigError: when the backend configuration cannot be used.
    """
    ref: dict[str, Any] = dict(SAMPLE)
    if path:
        ref = {"kind": "file", "path": str(Path(path).expanduser().resolve())}
    backends = sorted(load_settings().backends)
    if backends:
        ref["backends"] = backends
    return ref


def backend_for(environment: Mapping[str, Any], *, database: str | None = None) -> EvidenceBackend:
    """The evidence backend of a recorded environment (``database`` holds the runbook index).

    Raises:
        ResumeRefused: when the environment file cannot be read any more, the real backends the
            run used are not the ones configured now, or the kind of environment is unknown to
            this version.
    """
    kind = environment.get("kind", "sample")
    try:
        settings = load_settings()
    except ConfigError as exc:
        raise ResumeRefused(f"the backend configuration cannot be used: {exc}") from exc
    recorded, now = list(environment.get("backends", [])), sorted(settings.backends)
    if recorded != now:
        raise ResumeRefused(
            f"the diagnosis ran with the backends {', '.join(recorded) or 'none (the sample)'}; "
            f"now {', '.join(now) or 'none'} are configured: configure the same ones to resume"
        )
    if kind == "sample":
        return configured_backend(settings, database=database)
    if kind == "file":
        path = str(environment.get("path", ""))
        try:
            return configured_backend(
                settings, environment=load_environment(path), database=database
            )
        except EnvironmentFileError as exc:
            raise ResumeRefused(
                f"the diagnosis ran on the environment file {path}, which cannot be used now: {exc}"
            ) from exc
    raise ResumeRefused(
        f"the diagnosis ran on an evidence environment of kind {kind!r}, "
        "which this version cannot open"
    )
