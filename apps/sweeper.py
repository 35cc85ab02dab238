"""The sweeper: no diagnosis stays ``running`` after the process running it died.

A diagnosis whose lease expired (``persistence/leases.py``) belongs to a process that stopped
without finishing it: killed, crashed, its machine gone. Every process sweeps once when it opens
the database; servers (``superbiz serve``, the API mounted in the LangGraph server) sweep again
every ``SUPERBIZ_SWEEP_INTERVAL_S`` seconds (default 30; 0 turns the periodic sweep off).

- A server resumes an orphan in the background with the settings it started with (one automatic
  attempt per diagnosis: an orphan whose resume was itself orphaned is marked failed), and marks
  it ``failed`` with the reason when it cannot be resumed (nothing to resume, settings this
  server cannot honour, the thread busy with another run is left for the next sweep).
- The command line never starts a diagnosis nobody asked for: it marks orphans ``failed`` with
  the reason and the command that resumes them.
- An orphan that an alert investigation still queued or running owns is left to the alert
  queue (``apps/http/alert_receiver.py``), whatever process sweeps: its worker resumes it, or
  asks its question again when the run stopped before its first checkpoint.

The same loop prunes old checkpoints when ``SUPERBIZ_RETENTION_DAYS`` is set (see
``persistence/retention.py``), at most once an hour.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from persistence.alert_queue import AlertQueue
from persistence.database import setting_value
from persistence.leases import Lease
from persistence.locks import ThreadBusy
from persistence.retention import retention_days
from persistence.store import Persistence
from state import catalog
from state.display import one_line

logger = logging.getLogger("superbiz.sweeper")

AUTO_RESUMES = 1
"""Automatic resumes a diagnosis gets; after that an orphan is marked failed."""
PRUNE_EVERY_S = 3600.0

Action = Literal["resumed", "failed", "finished", "busy", "taken", "queued"]
Resume = Callable[[str], object]
"""Resume one diagnosis by id to its end (raising when it cannot)."""


@dataclass(frozen=True)
class Swept:
    """What the sweep did with one orphan."""

    diagnosis_id: str
    thread_id: str
    action: Action
    reason: str


def orphan_reason(lease: Lease) -> str:
    """Why a diagnosis is an orphan, for its note."""
    expired = datetime.fromtimestamp(lease.expires_at, UTC).isoformat(timespec="seconds")
    return (
        f"the process running it ({lease.holder}, {lease.origin}) stopped without finishing "
        f"it; its lease expired at {expired}"
    )


def resume_hint(thread_id: str, diagnosis_id: str) -> str:
    """How a user resumes a failed diagnosis."""
    return (
        f"resume with superbiz diagnose --resume --thread {thread_id} or "
        f"POST /api/diagnoses/{diagnosis_id}/resume"
    )


def sweep(persistence: Persistence, *, resume: Resume | None = None) -> list[Swept]:
    """Deal with every orphaned diagnosis once: resume it (``resume`` given) or mark it failed.

    Raises:
        DatabaseError: when the database cannot be used.
    """
    leases = persistence.locks.leases
    audit = persistence.audit
    done: list[Swept] = []
    for lease in leases.expired():
        if not leases.take_over(lease):  # another sweeper was quicker
            done.append(Swept(lease.diagnosis_id, lease.thread_id, "taken", ""))
            continue
        record = audit.get(lease.diagnosis_id)
        reason = orphan_reason(lease)
        if record is None or record["status"] != "running":
            leases.forget(lease.diagnosis_id)
            done.append(Swept(lease.diagnosis_id, lease.thread_id, "finished", reason))
            continue
        if AlertQueue(persistence.db, "sweeper").unfinished(lease.diagnosis_id):
            leases.forget(lease.diagnosis_id)  # its queue row resumes or reruns it
            done.append(Swept(lease.diagnosis_id, lease.thread_id, "queued", reason))
            continue
        if resume is not None and lease.attempts < AUTO_RESUMES:
            done.append(_resume(persistence, lease, reason, resume))
            continue
        why = reason if resume is None else f"{reason} (after an automatic resume)"
        note = f"failed: {why}; {resume_hint(lease.thread_id, lease.diagnosis_id)}"
        audit.mark(lease.diagnosis_id, status="failed", note=note)
        leases.forget(lease.diagnosis_id)
        done.append(Swept(lease.diagnosis_id, lease.thread_id, "failed", why))
    return done


def _resume(persistence: Persistence, lease: Lease, reason: str, resume: Resume) -> Swept:
    leases, audit = persistence.locks.leases, persistence.audit
    logger.warning("resuming orphaned diagnosis %s: %s", lease.diagnosis_id, reason)
    try:
        resume(lease.diagnosis_id)
    except ThreadBusy:  # a live run has the thread now: the next sweep tries again
        leases.give_back(lease.diagnosis_id)
        return Swept(lease.diagnosis_id, lease.thread_id, "busy", reason)
    except Exception as exc:
        record = audit.get(lease.diagnosis_id)
        text = one_line(str(getattr(exc, "message", exc))) or type(exc).__name__
        if record is not None and record["status"] == "running":
            note = f"failed: {reason}; it could not be resumed: {text}"
            audit.mark(lease.diagnosis_id, status="failed", note=note)
        leases.release(lease.diagnosis_id)
        return Swept(lease.diagnosis_id, lease.thread_id, "failed", text)
    return Swept(lease.diagnosis_id, lease.thread_id, "resumed", reason)


def sweep_quietly(persistence: Persistence, *, resume: Resume | None = None) -> list[Swept]:
    """``sweep``, logging instead of raising: a read-only or busy database fails no command."""
    try:
        return sweep(persistence, resume=resume)
    except Exception as exc:
        logger.warning("sweep of orphaned diagnoses failed: %s", exc)
        return []


def sweep_interval() -> float:
    """The configured seconds between periodic sweeps (0: none).

    Raises:
        DatabaseError: when ``SUPERBIZ_SWEEP_INTERVAL_S`` is not a number.
    """
    seconds: float = setting_value(catalog.SWEEP_INTERVAL_S)
    return seconds


class PeriodicSweeper:
    """A background thread that sweeps (and prunes, when retention is set) every ``interval``.

    Args:
        open_persistence: Returns the server's open persistence (opening it if needed).
        resume: Resumes one diagnosis by id.
        interval: Seconds between sweeps.
    """

    def __init__(
        self, open_persistence: Callable[[], Persistence], resume: Resume, interval: float
    ) -> None:
        self._open = open_persistence
        self._resume = resume
        self._interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pruned_at = float("-inf")

    def start(self) -> None:
        """Start sweeping in the background (the first sweep at once)."""
        self._thread = threading.Thread(target=self._loop, name="superbiz-sweeper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop after the current sweep (waits at most a few seconds)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def run_once(self) -> list[Swept]:
        """One sweep, and a prune when one is due."""
        persistence = self._open()
        swept = sweep_quietly(persistence, resume=self._resume)
        days = retention_days()
        if days is not None and time.monotonic() - self._pruned_at > PRUNE_EVERY_S:
            from persistence.retention import prune_finished

            try:
                prune_finished(persistence.db, persistence.checkpointer, keep_days=days)
            except Exception as exc:
                logger.warning("pruning old checkpoints failed: %s", exc)
            self._pruned_at = time.monotonic()
        return swept

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception as exc:  # the database may be down; the next round tries again
                logger.warning("sweep failed: %s", exc)
            if self._interval <= 0 or self._stop.wait(self._interval):
                return
