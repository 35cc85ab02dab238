"""A flood of Alertmanager notifications into ``superbiz serve --workers 2`` killed halfway.

``flood_and_crash`` starts the server on a PostgreSQL database, sends ``notifications``
notifications of ``groups`` alert groups spread over ``seconds`` (every other notification of a
group adds an alert, so it starts a new investigation; the others repeat the group's last one),
kills the whole server with SIGKILL ``kill_after_s`` into the flood, starts it again on the same
database and waits until no investigation is queued or running. It then counts what the
database holds against what the server accepted (every 2xx answer's diagnosis id). Used by
``tests/test_alert_flood.py`` and ``bench/alert_flood.py``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

ROOT = Path(__file__).resolve().parent.parent
PAYLOAD = Path(__file__).resolve().parent / "alertmanager" / "firing.json"
KEY = {"Authorization": "Bearer key-flood", "Content-Type": "application/json"}
SENDERS = 8


@dataclass
class FloodResult:
    """What a flood with a crash in the middle left."""

    sent: int = 0
    accepted: int = 0
    """Notifications answered 2xx (before the crash)."""
    refused: Counter[int] = field(default_factory=Counter)
    """Other answers by status (0: no answer: the server was being killed)."""
    flood_s: float = 0.0
    """From the first notification to the kill."""
    investigations: int = 0
    """Distinct diagnosis ids in the 2xx answers."""
    at_kill: Counter[str] = field(default_factory=Counter)
    """Queue rows by status right after the kill."""
    rows: Counter[str] = field(default_factory=Counter)
    """Queue rows by status at the end."""
    records: Counter[str] = field(default_factory=Counter)
    """Diagnosis records (of the accepted ids) by status at the end."""
    missing: list[str] = field(default_factory=list)
    """Accepted diagnosis ids without a finished row and record."""
    extra_records: int = 0
    """Diagnosis records of no accepted investigation (a diagnosis run twice under a new id)."""
    errors: list[str] = field(default_factory=list)
    """Why rows or records failed."""
    recovery_s: float = 0.0
    """From the restart to the last investigation finished."""

    @property
    def accepted_per_s(self) -> float:
        """Notifications accepted per second of flood."""
        return self.accepted / self.flood_s if self.flood_s else 0.0

    @property
    def finished(self) -> int:
        """Accepted investigations finished ``done`` (row and record)."""
        return self.investigations - len(self.missing)


def notification(group: int, alerts: int) -> dict[str, Any]:
    """A firing notification of group ``group`` with ``alerts`` alerts."""
    body: dict[str, Any] = json.loads(PAYLOAD.read_text())
    template = body["alerts"][0]
    body["groupKey"] = f'{{}}:{{alertname="HighErrorRate", service="svc-{group}"}}'
    body["alerts"] = [
        {
            **template,
            "labels": {**template["labels"], "service": f"svc-{group}", "alertname": f"Alert{n}"},
            "fingerprint": f"{group:04x}{n:04x}",
            "startsAt": f"2026-12-01T10:{n % 60:02d}:00Z",
        }
        for n in range(alerts)
    ]
    return body


def _env(tmp: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SUPERBIZ_", "OPENAI_")) and k != "PYTEST_CURRENT_TEST"
    }
    env.update(
        XDG_DATA_HOME=str(tmp / "xdg"),
        SUPERBIZ_API_KEYS="key-flood=flood",
        SUPERBIZ_API_RATE_PER_MIN="100000",
        SUPERBIZ_LANGUAGE="en",
        SUPERBIZ_LEASE_TTL_S="2",
        SUPERBIZ_SWEEP_INTERVAL_S="1",
        SUPERBIZ_ALERT_CLAIM_S="2",
        SUPERBIZ_ALERT_QUEUE_MAX="100000",
        **extra,
    )
    return env


def _start(url: str, port: int, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "apps.cli",
                "serve",
                "--workers",
                "2",
                "--db",
                url,
                "--port",
                str(port),
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"superbiz serve exited with {proc.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    _kill(proc)
    raise RuntimeError(f"superbiz serve did not become healthy:\n{log.read_text()}")


def _kill(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)


def _statuses(url: str) -> Counter[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT status, COUNT(*) FROM alert_investigation GROUP BY status"
        ).fetchall()
    return Counter({str(status): int(n) for status, n in rows})


def flood_and_crash(
    url: str,
    tmp: Path,
    *,
    notifications: int,
    groups: int,
    seconds: float,
    kill_after_s: float,
    settle_s: float = 300.0,
    extra_env: dict[str, str] | None = None,
) -> FloodResult:
    """Flood, kill, restart, wait, count (see the module). ``url``: an empty PostgreSQL DB."""
    from tests.prometheus_kit import free_port

    result = FloodResult()
    env = _env(tmp, extra_env or {})
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp / "flood-server.log"
    accepted_ids: set[str] = set()
    lock = threading.Lock()
    killed = threading.Event()
    server = _start(url, port, env, log)
    try:
        bodies = [
            json.dumps(notification(i % groups, 1 + (i // groups) // 2)).encode()
            for i in range(notifications)
        ]
        start = time.monotonic()

        def send(index: int) -> None:
            due = start + seconds * index / notifications
            time.sleep(max(0.0, due - time.monotonic()))
            if killed.is_set():
                return
            try:
                answer = httpx.post(
                    f"{base}/api/alertmanager", content=bodies[index], headers=KEY, timeout=30
                )
                status = answer.status_code
            except httpx.HTTPError:
                status = 0
            with lock:
                result.sent += 1
                if 200 <= status < 300:
                    result.accepted += 1
                    accepted_ids.update(a["diagnosis_id"] for a in answer.json()["accepted"])
                else:
                    result.refused[status] += 1

        def kill_later() -> None:
            time.sleep(max(0.0, start + kill_after_s - time.monotonic()))
            killed.set()
            _kill(server)
            result.flood_s = time.monotonic() - start

        killer = threading.Thread(target=kill_later)
        killer.start()
        with ThreadPoolExecutor(SENDERS) as pool:
            list(pool.map(send, range(notifications)))
        killer.join()
    finally:
        _kill(server)
    result.at_kill = _statuses(url)
    result.investigations = len(accepted_ids)
    restarted = _start(url, port, env, log)
    began = time.monotonic()
    try:
        deadline = began + settle_s
        while time.monotonic() < deadline:
            statuses = _statuses(url)
            if not statuses["queued"] and not statuses["running"]:
                break
            time.sleep(0.5)
        result.recovery_s = time.monotonic() - began
    finally:
        _kill(restarted, signal.SIGTERM)
    _count(url, accepted_ids, result)
    return result


def _count(url: str, accepted: set[str], result: FloodResult) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT diagnosis_id, status, error FROM alert_investigation"
        ).fetchall()
        records = conn.execute("SELECT id, status, note FROM diagnosis_session").fetchall()
    row_status = {str(d): str(s) for d, s, _ in rows}
    record_status = {str(d): str(s) for d, s, _ in records}
    result.rows = Counter(row_status.values())
    result.records = Counter(s for d, s in record_status.items() if d in accepted)
    result.extra_records = len(set(record_status) - accepted)
    result.missing = sorted(
        d for d in accepted if row_status.get(d) != "done" or record_status.get(d) != "done"
    )
    result.errors = sorted(
        {f"row: {e}" for _, s, e in rows if s == "failed"}
        | {f"record: {n}" for _, s, n in records if s != "done"}
    )
