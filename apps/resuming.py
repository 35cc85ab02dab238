"""Resuming a stored diagnosis from any entry point: its settings, its evidence environment.

The command line (``diagnose --resume``), the HTTP API (``POST /api/diagnoses/{id}/resume``)
and the sweeper all resume the same way: the settings stored with the diagnosis
(``graph/resume.py``) and the evidence environment it ran on, recorded as ``environment`` in
those settings: ``{"kind": "sample"}`` (the bundled sample) or ``{"kind": "file", "path": ...}``
(``--env FILE``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from graph.builder import build_graph
from graph.resume import ResumePlan, ResumeRefused, models_configured, plan_resume
from persistence.store import Persistence
from tools.backend import EvidenceBackend
from tools.environment import EnvironmentFileError, default_environment, load_environment
from tools.sample import SampleBackend

SAMPLE: dict[str, Any] = {"kind": "sample"}


def environment_ref(path: str | None) -> dict[str, Any]:
    """How a run's evidence environment is recorded: the sample, or the absolute file path."""
    if not path:
        return dict(SAMPLE)
    return {"kind": "file", "path": str(Path(path).expanduser().resolve())}


def backend_for(environment: Mapping[str, Any]) -> EvidenceBackend:
    """The evidence backend of a recorded environment.

    Raises:
        ResumeRefused: when the environment file cannot be read any more, or the kind of
            environment is unknown to this version.
    """
    kind = environment.get("kind", "sample")
    if kind == "sample":
        return SampleBackend(default_environment())
    if kind == "file":
        path = str(environment.get("path", ""))
        try:
            return SampleBackend(load_environment(path))
        except EnvironmentFileError as exc:
            raise ResumeRefused(
                f"the diagnosis ran on the environment file {path}, which cannot be used now: {exc}"
            ) from exc
    raise ResumeRefused(
        f"the diagnosis ran on an evidence environment of kind {kind!r}, "
        "which this version cannot open"
    )


def plan_for(
    persistence: Persistence,
    thread_id: str,
    *,
    requested: Mapping[str, Any] | None = None,
    models_available: Callable[[], bool] = models_configured,
) -> ResumePlan:
    """The resume plan of a thread's interrupted diagnosis (see ``graph.resume.plan_resume``).

    Raises:
        NothingToResume: when the thread has nothing interrupted.
        ResumeRefused: when the stored settings cannot be honoured here.
    """
    reader = build_graph(ledger=persistence.ledger, audit=persistence.audit).compile(
        checkpointer=persistence.checkpointer
    )
    return plan_resume(
        reader,
        persistence.audit,
        thread_id,
        requested=requested,
        models_available=models_available,
    )
