"""The machine's own PostgreSQL server log, for tests that read real server log lines.

``postgres_log_glob`` finds the log (Debian writes it to /var/log/postgresql/; another place
with ``SUPERBIZ_TEST_POSTGRES_LOG``); ``provoke_postgres_fatal`` makes the server write a known
FATAL line (a connection to a database that does not exist) and ``wait_for_line`` waits until
the server has written it. A log that cannot be read skips the test (fails it in CI).
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


def wait_for_line(pattern: str, needle: str, timeout: float = 10.0) -> None:
    """Wait until the server has written ``needle`` to its log (it writes asynchronously)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name in glob.glob(pattern):
            with open(name, "rb") as handle:
                handle.seek(max(0, os.path.getsize(name) - 256 * 1024))
                if needle.encode() in handle.read():
                    return
        time.sleep(0.1)
    pytest.fail(f"PostgreSQL did not log {needle!r} to {pattern} within {timeout:g} s")
