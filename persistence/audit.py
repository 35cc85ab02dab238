"""Audit store: one record per diagnosis with its ``self_evaluation`` channels.

``InMemoryAuditStore`` is the default for a single process; durable stores implement the same
protocol. Channels are updated read-modify-write: each write replaces only its own channel, and
the whole ``self_evaluation`` object is created only when it is still null.
"""

from __future__ import annotations

import copy
import threading
from datetime import UTC, datetime
from typing import Any, Protocol


def utcnow() -> str:
    """Current UTC time as ISO-8601 text."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class AuditStore(Protocol):
    """Where diagnoses are recorded for audit."""

    def start_diagnosis(self, diagnosis_id: str, *, thread_id: str, question: str) -> None:
        """Create the diagnosis row (status ``running``); a second call changes nothing."""

    def update_channel(self, diagnosis_id: str, channel: str, value: dict[str, Any]) -> None:
        """Replace one ``self_evaluation`` channel, preserving the others."""

    def finish_diagnosis(
        self,
        diagnosis_id: str,
        *,
        status: str,
        rounds: int,
        verdict: str | None,
        score: float | None,
        answer: str | None,
    ) -> None:
        """Record the outcome of a diagnosis."""

    def mark(self, diagnosis_id: str, *, status: str | None = None, note: str) -> None:
        """Set a note (and optionally the status) on a diagnosis, e.g. resumed or failed."""

    def abandon_running(self, thread_id: str, *, keep: str | None = None) -> list[str]:
        """Mark every ``running`` diagnosis of a thread (except ``keep``) as abandoned."""

    def get(self, diagnosis_id: str) -> dict[str, Any] | None:
        """Return one diagnosis record, or None."""

    def list(self, thread_id: str | None = None) -> list[dict[str, Any]]:
        """Return diagnosis records, oldest first, optionally of one thread."""


class InMemoryAuditStore:
    """Process-local audit store (thread-safe)."""

    def __init__(self) -> None:
        self._rows: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def start_diagnosis(self, diagnosis_id: str, *, thread_id: str, question: str) -> None:
        """Create the diagnosis row (status ``running``); a second call changes nothing."""
        with self._lock:
            if diagnosis_id in self._rows:
                return
            now = utcnow()
            self._rows[diagnosis_id] = {
                "id": diagnosis_id,
                "thread_id": thread_id,
                "question": question,
                "status": "running",
                "rounds": 0,
                "verdict": None,
                "score": None,
                "final_answer": None,
                "created_at": now,
                "updated_at": now,
                "note": None,
                "self_evaluation": None,
            }

    def update_channel(self, diagnosis_id: str, channel: str, value: dict[str, Any]) -> None:
        """Replace one ``self_evaluation`` channel, preserving the others."""
        with self._lock:
            row = self._rows.get(diagnosis_id)
            if row is None:
                raise KeyError(f"unknown diagnosis {diagnosis_id!r}")
            current = row["self_evaluation"]
            if current is None:
                row["self_evaluation"] = {channel: copy.deepcopy(value)}
            else:
                current[channel] = copy.deepcopy(value)
            row["updated_at"] = utcnow()

    def finish_diagnosis(
        self,
        diagnosis_id: str,
        *,
        status: str,
        rounds: int,
        verdict: str | None,
        score: float | None,
        answer: str | None,
    ) -> None:
        """Record the outcome of a diagnosis."""
        with self._lock:
            row = self._rows.get(diagnosis_id)
            if row is None:
                raise KeyError(f"unknown diagnosis {diagnosis_id!r}")
            row.update(
                status=status,
                rounds=rounds,
                verdict=verdict,
                score=score,
                final_answer=answer,
                updated_at=utcnow(),
            )

    def mark(self, diagnosis_id: str, *, status: str | None = None, note: str) -> None:
        """Set a note (and optionally the status) on a diagnosis, e.g. resumed or failed."""
        with self._lock:
            row = self._rows.get(diagnosis_id)
            if row is None:
                raise KeyError(f"unknown diagnosis {diagnosis_id!r}")
            row.update(note=note, updated_at=utcnow())
            if status is not None:
                row["status"] = status

    def abandon_running(self, thread_id: str, *, keep: str | None = None) -> list[str]:
        """Mark every ``running`` diagnosis of a thread (except ``keep``) as abandoned."""
        with self._lock:
            ids = [
                r["id"]
                for r in self._rows.values()
                if r["thread_id"] == thread_id and r["status"] == "running" and r["id"] != keep
            ]
            for diagnosis_id in ids:
                self._rows[diagnosis_id].update(
                    status="abandoned",
                    note="superseded by a newer question on the same thread",
                    updated_at=utcnow(),
                )
            return ids

    def get(self, diagnosis_id: str) -> dict[str, Any] | None:
        """Return a copy of one diagnosis record, or None."""
        with self._lock:
            row = self._rows.get(diagnosis_id)
            return copy.deepcopy(row) if row is not None else None

    def list(self, thread_id: str | None = None) -> list[dict[str, Any]]:
        """Return copies of diagnosis records, oldest first, optionally of one thread."""
        with self._lock:
            rows = [r for r in self._rows.values() if thread_id in (None, r["thread_id"])]
            return copy.deepcopy(sorted(rows, key=lambda r: r["created_at"]))
