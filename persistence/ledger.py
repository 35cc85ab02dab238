"""The invocation ledger: where every tool call is recorded before its result is used.

Recording is idempotent on the invocation's `idempotency_key`, so a graph node that is executed
again after a resume gets the row it already wrote instead of a duplicate. Invocation ids are
`inv-1`, `inv-2`, ... in recording order within one diagnosis.
"""

from __future__ import annotations

import builtins
import threading
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class InvocationLedger(Protocol):
    """Storage of tool invocations (contracts section 2)."""

    def record(self, invocation: dict[str, Any]) -> dict[str, Any]:
        """Stores an invocation once per idempotency key.

        Args:
            invocation: The invocation row; must carry `diagnosis_id` and `idempotency_key`.
                Its `invocation_id` is assigned here.

        Returns:
            The stored row: the existing one, unchanged, when the key was already recorded;
            otherwise the new row with `invocation_id` = `inv-<n>`, n being the number of
            invocations already recorded for the diagnosis plus one.
        """
        ...

    def find(self, idempotency_key: str) -> dict[str, Any] | None:
        """Returns the row recorded under this idempotency key, or None."""
        ...

    def list(self, diagnosis_id: str) -> builtins.list[dict[str, Any]]:
        """Returns the rows of one diagnosis in call order."""
        ...


class InMemoryLedger:
    """A thread-safe ledger held in memory (tests, the CLI, scenario runs).

    Rows are shallow-copied in and out: the ledger takes over the nested values of a recorded
    row and shares them with the rows it hands out, so treat both as read-only (deep copies on
    every record and read made the ledger the largest cost of a tool call).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_key: dict[str, dict[str, Any]] = {}
        self._by_diagnosis: dict[str, builtins.list[str]] = {}

    def record(self, invocation: dict[str, Any]) -> dict[str, Any]:
        """Stores an invocation once per idempotency key.

        Args:
            invocation: The invocation row; must carry `diagnosis_id` and `idempotency_key`.

        Returns:
            A copy of the stored row (the existing one when the key was already recorded).

        Raises:
            ValueError: When `diagnosis_id` or `idempotency_key` is missing.
        """
        key = invocation.get("idempotency_key")
        diagnosis_id = invocation.get("diagnosis_id")
        if not isinstance(key, str) or not key:
            raise ValueError("invocation has no idempotency_key")
        if not isinstance(diagnosis_id, str) or not diagnosis_id:
            raise ValueError("invocation has no diagnosis_id")
        with self._lock:
            existing = self._by_key.get(key)
            if existing is not None:
                return dict(existing)
            keys = self._by_diagnosis.setdefault(diagnosis_id, [])
            row = dict(invocation)
            row["invocation_id"] = f"inv-{len(keys) + 1}"
            self._by_key[key] = row
            keys.append(key)
            return dict(row)

    def find(self, idempotency_key: str) -> dict[str, Any] | None:
        """Returns a copy of the row recorded under this idempotency key, or None."""
        with self._lock:
            row = self._by_key.get(idempotency_key)
            return dict(row) if row is not None else None

    def list(self, diagnosis_id: str) -> builtins.list[dict[str, Any]]:
        """Returns copies of the rows of one diagnosis in call order."""
        with self._lock:
            keys = self._by_diagnosis.get(diagnosis_id, [])
            return [dict(self._by_key[k]) for k in keys]
