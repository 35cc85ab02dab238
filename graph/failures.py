"""A run that fails: its one-line reason, and the ``failed`` record with a degraded answer.

``record_failure`` is called by the run guard (``graph/guard.py``) when a run of the graph ends
with an error, whoever started it (command line, HTTP API, LangGraph server, sweeper), so every
failed diagnosis is recorded the same way: status ``failed``, the reason as its note, the
``failure`` and ``usage`` channels, and as its answer a degraded one saying it could not finish.
"""

from __future__ import annotations

from models.failures import ModelCallFailed
from nodes.audit import finish, usage_record
from persistence.audit import AuditStore
from state.context import Context
from state.display import error_line
from state.graph_state import DiagnosisState
from state.records import FailureRecord
from verification.answer import failed_answer


class DiagnosisFailed(RuntimeError):
    """A diagnosis could not finish; it is recorded ``failed`` with the reason.

    Attributes:
        reason: one line saying what went wrong and, where it can, what to fix.
        answer: the degraded answer the user gets (it says the diagnosis could not finish).
        diagnosis_id: the failed diagnosis, when it had started.
        cause: the exception that ended it (``ModelCallFailed`` for a model endpoint).
    """

    def __init__(
        self, reason: str, answer: str, diagnosis_id: str | None, cause: BaseException
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.answer = answer
        self.diagnosis_id = diagnosis_id
        self.cause = cause


def failure_reason(exc: BaseException) -> str:
    """The one-line reason of a failed run."""
    return exc.reason if isinstance(exc, ModelCallFailed) else error_line(exc)


def failure_of(
    values: DiagnosisState, context: Context | None, exc: BaseException
) -> DiagnosisFailed:
    """The ``DiagnosisFailed`` of a run that ended with ``exc`` in state ``values``."""
    reason = failure_reason(exc)
    diagnosis_id = values.get("diagnosis_id")
    language = context.language if context is not None else "zh"
    return DiagnosisFailed(reason, failed_answer(reason, language, diagnosis_id), diagnosis_id, exc)


def record_failure(
    values: DiagnosisState,
    diagnosis_id: str,
    audit: AuditStore,
    context: Context | None,
    exc: BaseException,
) -> None:
    """Record a running diagnosis as ``failed`` (reason, partial audit, degraded answer).

    A diagnosis no longer ``running`` (finished, or already recorded) is left as it is.
    Bookkeeping errors are the caller's to swallow: they must never hide ``exc``.
    """
    record = audit.get(diagnosis_id)
    if record is None or record["status"] != "running":
        return
    failure = failure_of({**values, "diagnosis_id": diagnosis_id}, context, exc)
    audit.update_channel(
        diagnosis_id,
        "failure",
        FailureRecord(
            reason=failure.reason,
            error_type=type(exc).__name__,
            round=values.get("round", 1),
            route=list(values.get("route", [])),
        ),
    )
    if context is not None:
        audit.update_channel(diagnosis_id, "usage", usage_record(values, context))
    finish(audit, diagnosis_id, values, "failed", verdict=None, score=None, answer=failure.answer)
    audit.mark(diagnosis_id, note=f"failed: {failure.reason}")
