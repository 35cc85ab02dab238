"""Shared fixtures. Tests never reach the network: outbound sockets are refused except loopback."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver

from evidence.config import BACKENDS, TOP_LEVEL, variable_name
from persistence.store import Persistence, open_persistence
from tests.opensearch_kit import opensearch_url  # noqa: F401  (a session fixture)
from tests.prometheus_kit import prometheus_stack  # noqa: F401  (a session fixture)

SLOW_MODULES = frozenset(
    {
        "test_alert_receiver.py",
        "test_alert_serve_recovery.py",
        "test_alertmanager_live.py",
        "test_api_serve.py",
        "test_backend_edges.py",
        "test_cli_startup.py",
        "test_export.py",
        "test_langgraph_dev.py",
        "test_langgraph_serving.py",
        "test_migration_versions.py",
        "test_models_http.py",
        "test_prometheus.py",
        "test_runbooks.py",
        "test_serve_recovery.py",
        "test_serving.py",
        "test_web.py",
        "test_web_firefox.py",
    }
)
"""Modules whose tests start real servers, browsers or programs: the ``slow`` marker.

``pytest -m "not slow"`` runs the rest, the unit part, in well under two minutes
(``bench/suite_loop.py`` measures it); the whole suite runs on every core (``-n auto``). A test
module elsewhere can mark itself with ``pytestmark = pytest.mark.slow``.
"""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks every test of a module in ``SLOW_MODULES`` as ``slow``."""
    for item in items:
        if item.path.name in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)


_real_connect = socket.socket.connect


def _guarded_connect(self: socket.socket, address: Any) -> Any:
    host = address[0] if isinstance(address, tuple) else address
    if isinstance(host, str) and (
        host in {"localhost", "::1"} or host.startswith("127.") or host.startswith("/")
    ):
        return _real_connect(self, address)
    if self.family == socket.AF_UNIX:
        return _real_connect(self, address)
    raise RuntimeError(f"tests must not reach the network (tried to connect to {address!r})")


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(socket.socket, "connect", _guarded_connect)
    yield


@pytest.fixture(autouse=True)
def _isolated_data_dir(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The embedded SQLite default lands in a throw-away data directory, never the user's."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg-data")))
    monkeypatch.delenv("SUPERBIZ_DATABASE_URL", raising=False)


@pytest.fixture(autouse=True)
def _no_backend_configuration(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No real backend unless a test configures one: an empty config file, no backend variable."""
    prefixes = tuple(variable_name(backend.name, "") for backend in BACKENDS)
    top_level = {setting.variable for setting in TOP_LEVEL}
    for name in list(os.environ):
        if name.startswith(prefixes) or name in top_level:
            monkeypatch.delenv(name)
    empty = tmp_path_factory.getbasetemp() / "superbiz-empty.toml"
    empty.touch()
    monkeypatch.setenv("SUPERBIZ_CONFIG", str(empty))


POSTGRES_ADMIN_URL = os.environ.get(
    "SUPERBIZ_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)


def _postgres_unavailable(reason: str) -> None:
    if os.environ.get("SUPERBIZ_REQUIRE_POSTGRES"):
        pytest.fail(f"PostgreSQL is required here (SUPERBIZ_REQUIRE_POSTGRES is set): {reason}")
    pytest.skip(f"PostgreSQL not reachable: {reason}")


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A throw-away PostgreSQL database for this test session, dropped afterwards."""
    import psycopg

    name = f"superbiz_test_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as exc:
        _postgres_unavailable(str(exc).strip())
    base = POSTGRES_ADMIN_URL.rsplit("/", 1)[0]
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


_TABLES = (
    "diagnosis_session",
    "tool_invocation",
    "thread_lock",
    "checkpoints",
    "checkpoint_blobs",
    "checkpoint_writes",
    "thread_owner",
    "diagnosis_lease",
    "alert_investigation",
    "kb_chunk",
    "kb_file",
    "superbiz_schema",
)


def _empty_postgres(url: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        existing = {
            row[0]
            for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
            ).fetchall()
        }
        tables = [t for t in _TABLES if t in existing]
        if tables:
            conn.execute(f"TRUNCATE {', '.join(tables)}")


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """One test body, two databases: an SQLite file and a real PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'superbiz.sqlite'}"
        return
    url: str = request.getfixturevalue("postgres_url")
    _empty_postgres(url)
    yield url


@pytest.fixture
def own_database(postgres_url: str) -> Iterator[tuple[str, str]]:
    """A PostgreSQL database of its own, next to the session's, dropped afterwards.

    Yields:
        Its URL and the URL (the session's database) to drop or create it from.
    """
    import psycopg

    base, _, name = postgres_url.rpartition("/")
    own = f"{name}_own_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_url, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'CREATE DATABASE "{own}"')
    try:
        yield f"{base}/{own}", postgres_url
    finally:
        with psycopg.connect(postgres_url, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{own}" WITH (FORCE)')


@pytest.fixture
def store(database_url: str) -> Iterator[Persistence]:
    """The persistence of ``database_url`` (both databases), closed after the test."""
    persistence = open_persistence(database_url)
    try:
        yield persistence
    finally:
        persistence.close()


@pytest.fixture
def no_model_or_superbiz_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ``OPENAI_*`` or ``SUPERBIZ_*`` variable: offline rules, every setting at its default."""
    for name in list(os.environ):
        if name.startswith(("OPENAI_", "SUPERBIZ_")):
            monkeypatch.delenv(name)


@pytest.fixture(params=["memory", "sqlite"])
def checkpointer(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[BaseCheckpointSaver[str]]:
    """One graph test body, two checkpointers: LangGraph's in-memory saver and an SQLite file."""
    if request.param == "memory":
        yield InMemorySaver()
        return
    with SqliteSaver.from_conn_string(str(tmp_path / "checkpoints.sqlite")) as saver:
        yield saver
