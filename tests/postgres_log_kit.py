"""The machine's own PostgreSQL server log, for tests that read real server log lines.

``postgres_log_glob`` finds the log (Debian writes it to /var/log/postgresql/; another place
with ``SUPERBIZ_TEST_POSTGRES_LOG``); ``provoke_postgres_fatal`` makes the server write a known
FATAL line (a connection to a database that does not exist, named uniquely) and
``wait_for_line`` waits until the server has written it, reading everything written since
``log_sizes`` was taken. A log that cannot be read skips the test (fails it in CI).
"""

from __future__ import annotations

import glob
import os
import time
import uuid

import psycopg
import pytest

from tests.components import component_unavailable
from tests.conftest import POSTGRES_ADMIN_URL

POSTGRES_LOG_GLOB = os.environ.get(
    "SUPERBIZ_TEST_POSTGRES_LOG", "/var/log/postgresql/postgresql-*.log"
)
"""Where the local PostgreSQL server writes its log (Debian's default)."""


def postgres_log_glob() -> str:
    """The server log's glob, or skip (fail in CI) when it cannot be read."""
    files = [f for f in glob.glob(POSTGRES_LOG_GLOB) if os.access(f, os.R_OK)]
    if not files:
        component_unavailable(
            "the PostgreSQL server log",
            f"no readable file matches {POSTGRES_LOG_GLOB}; set SUPERBIZ_TEST_POSTGRES_LOG",
        )
    return POSTGRES_LOG_GLOB


def provoke_postgres_fatal() -> str:
    """Connect to a database that does not exist; return its name (now in a FATAL line)."""
    name = f"superbiz_missing_{uuid.uuid4().hex[:10]}"
    base = POSTGRES_ADMIN_URL.rsplit("/", 1)[0]
    try:
        psycopg.connect(f"{base}/{name}", connect_timeout=5).close()
    except psycopg.OperationalError as exc:
        if "does not exist" not in str(exc):
            component_unavailable("PostgreSQL", str(exc).strip())
    else:
        pytest.fail(f"database {name} unexpectedly exists")
    return name


def log_sizes(pattern: str) -> dict[str, int]:
    """How long each log file is now: where ``wait_for_line`` starts reading."""
    return {name: os.path.getsize(name) for name in glob.glob(pattern)}


def wait_for_line(
    pattern: str, needle: str, timeout: float = 30.0, since: dict[str, int] | None = None
) -> str:
    """Wait until the server has written ``needle`` to its log and return that line.

    The server writes asynchronously while other processes may write to the same log: every
    file is read from where it ended before (``since``, from ``log_sizes``; a file that is new or
    shorter than it was is read from its start) to its end, however much was written meanwhile.
    Without ``since`` the whole of each file is read.
    """
    wanted = needle.encode()
    deadline = time.monotonic() + timeout
    while True:
        for name in glob.glob(pattern):
            start = (since or {}).get(name, 0)
            with open(name, "rb") as handle:
                if os.fstat(handle.fileno()).st_size < start:
                    start = 0  # rotated or truncated since
                handle.seek(start)
                for line in handle:
                    if wanted in line and line.endswith(b"\n"):  # written in full
                        return line.decode(errors="replace").rstrip("\n")
        if time.monotonic() >= deadline:
            pytest.fail(f"PostgreSQL did not log {needle!r} to {pattern} within {timeout:g} s")
        time.sleep(0.1)
