"""A resume continues the run it resumes: the settings the diagnosis started with, or a refusal.

``plan_resume`` finds the thread's interrupted diagnosis in its last checkpoint, read through the
checkpointer alone (``graph/saved_run.py``; no graph is built for it), reads the run settings
stored with it (``diagnosis_session.run_settings``) and checks that they can be honoured here: the
graph the resume runs on is compiled from them afterwards. A model-mode run needs a model
endpoint (``OPENAI_API_KEY``); settings the caller asks for must be the stored ones. A resume
that cannot continue the same run is refused with the reason, never finished differently (say,
on the offline rules instead of the models it started with).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from graph.compile import Stores
from graph.runner import NothingToResume
from graph.saved_run import SavedRun, read_saved_run
from state.catalog import models_configured as models_configured
from state.context import ROLES, Context
from state.records import DiagnosisRecord
from state.run_settings import RunSettings, context_from_settings


class ResumeRefused(ValueError):
    """The resume cannot continue the diagnosis with the settings it started with."""


@dataclass(frozen=True)
class ResumePlan:
    """What a resume runs: the diagnosis, its thread, and the settings it started with."""

    thread_id: str
    diagnosis_id: str
    context: Context
    environment: dict[str, Any]
    record: DiagnosisRecord | None


def _describe(ctx: Context) -> str:
    if ctx.offline:
        return "offline rules"
    models = ", ".join(f"{role} {ctx.model_for(role)}" for role in ROLES if role != "composer")
    return f"model mode ({models})"


def plan_resume(
    stores: Stores,
    thread_id: str,
    *,
    requested: Mapping[str, Any] | None = None,
    models_available: Callable[[], bool] = models_configured,
) -> ResumePlan:
    """The resume of a thread's interrupted diagnosis, with the settings it started with.

    Args:
        stores: Where the thread's checkpoints and the diagnosis's record are (the database's
            ``Persistence``).
        thread_id: The thread.
        requested: ``Context`` fields the caller set explicitly for the resume (e.g. ``--lang``);
            each must equal the stored value.
        models_available: Whether model mode can run here.

    Raises:
        NothingToResume: when the thread has nothing interrupted.
        ResumeRefused: when the stored settings cannot be honoured, or differ from ``requested``.
    """
    checkpointer = stores.checkpointer
    saved = SavedRun(thread_id) if checkpointer is None else read_saved_run(checkpointer, thread_id)
    if not saved.next:
        raise NothingToResume(
            f"thread {thread_id!r} has no interrupted diagnosis to resume"
            + (" (its last diagnosis finished)" if saved.values else "")
        )
    diagnosis_id = saved.resumed_diagnosis_id()
    if diagnosis_id is None:
        raise ResumeRefused(
            f"the run interrupted on thread {thread_id!r} stopped before its diagnosis started, "
            "so there are no settings to continue with; ask the question again"
        )
    record = stores.audit.get(diagnosis_id)
    if record is None:
        raise ResumeRefused(
            f"the run interrupted on thread {thread_id!r} stopped before its diagnosis started, "
            "so there are no settings to continue with; ask the question again"
        )
    stored = record["run_settings"]
    environment: dict[str, Any] = {}
    if stored:
        settings = cast(RunSettings, stored)
        try:
            context = context_from_settings(settings)
        except (TypeError, ValueError) as exc:
            raise ResumeRefused(
                f"diagnosis {diagnosis_id}: its stored run settings cannot be read ({exc})"
            ) from exc
        environment = dict(settings.get("environment") or {})
    else:  # recorded before run settings were stored: what the state says about the run
        run_info: Mapping[str, Any] = saved.values.get("run_info") or {}
        context = Context(
            offline=bool(run_info.get("offline", True)),
            language="en" if run_info.get("language") == "en" else "zh",
        )
    for name, value in (requested or {}).items():
        if getattr(context, name) != value:
            raise ResumeRefused(
                f"diagnosis {diagnosis_id} started with {name}={getattr(context, name)!r}; a "
                f"resume continues it with the settings it started with, so {name}={value!r} "
                "cannot be used (drop the option, or ask the question again on a new thread)"
            )
    if not context.offline and not models_available():
        raise ResumeRefused(
            f"diagnosis {diagnosis_id} ran in {_describe(context)}, but no model endpoint is "
            "configured here: set OPENAI_API_KEY (and OPENAI_BASE_URL) to resume it; it is not "
            "finished on the offline rules, which would give a different answer"
        )
    return ResumePlan(
        thread_id=thread_id,
        diagnosis_id=str(diagnosis_id),
        context=context,
        environment=environment,
        record=record,
    )
