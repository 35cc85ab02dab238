"""A real in-memory OpenSearch-compatible server (``osmem-server``, PyPI, MIT) for tests.

``opensearch_url`` (session-scoped) starts it once on a free loopback port and indexes, through
its HTTP ``_bulk`` API, an incident's log documents: ``logs-2026`` with dynamic mapping (text
fields with a ``keyword`` sub-field, as Elasticsearch and OpenSearch make them) and ``ecs-logs``
with an explicit mapping of nested names. A missing package skips the tests (fails them in CI:
``tests.components.component_unavailable``).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.components import component_unavailable

NOW = datetime.now(UTC).replace(microsecond=0)


def ago(minutes: float) -> str:
    """An ISO timestamp ``minutes`` before the session started."""
    return (NOW - timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


_ago = ago


def _request(method: str, url: str, body: bytes | None = None, kind: str = "json") -> Any:
    content = "application/x-ndjson" if kind == "ndjson" else "application/json"
    request = urllib.request.Request(
        url, data=body, method=method, headers={"Content-Type": content}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read() or b"{}")


def _bulk(url: str, index: str, documents: list[dict[str, Any]]) -> None:
    lines = []
    for document in documents:
        lines += [json.dumps({"index": {"_index": index}}), json.dumps(document)]
    answer = _request(
        "POST", f"{url}/_bulk?refresh=true", ("\n".join(lines) + "\n").encode(), "ndjson"
    )
    assert not answer.get("errors"), answer


POOL_TIMEOUT = "Cannot acquire connection from pool: timeout 30000 ms"

ORDER_LOG_ROWS: list[tuple[float, str, str, str | None, str]] = [
    # (minutes ago, level, service, host or None, message)
    (9, "ERROR", "order-service", "order-1", POOL_TIMEOUT),
    (7, "error", "order-service", "order-2", POOL_TIMEOUT),
    (5, "err", "order-service", None, "payment call failed, no host field"),
    (4, "INFO", "order-service", "order-1", "GET /orders 200"),
    (3, "ERROR", "order-service", "order-1", "upstream reset by peer"),
    (2, "ERROR", "payment-service", "pay-1", "card declined"),
    (1, "FATAL", "postgres", "db-1", 'database "ghost" does not exist'),
    (8, "FATAL", "postgres", "db-1", 'password authentication failed for user "shop"'),
    (180, "ERROR", "order-service", "order-1", "an error from three hours ago"),
]  # fmt: skip


def _order_log(
    minutes: float, level: str, service: str, host: str | None, message: str
) -> dict[str, Any]:
    document: dict[str, Any] = {"@timestamp": _ago(minutes), "level": level, "service": service}
    if host is not None:
        document["host"] = host
    document["message"] = message
    return document


ORDER_LOGS = [_order_log(*row) for row in ORDER_LOG_ROWS]

ECS_MAPPING = {
    "mappings": {
        "properties": {
            "@timestamp": {"type": "date"},
            "log": {"properties": {"level": {"type": "keyword"}}},
            "service": {"properties": {"name": {"type": "keyword"}}},
            "host": {"properties": {"name": {"type": "keyword"}}},
            "message": {"type": "text"},
        }
    }
}


@pytest.fixture(scope="session")
def opensearch_url() -> Iterator[str]:
    """A seeded osmem-server: logs-2026 (dynamic mapping) and ecs-logs (nested names)."""
    try:
        from osmem_server import OsmemError, OsmemServer
    except ImportError:
        component_unavailable("osmem-server", "pip install osmem-server (the dev extra has it)")
    try:
        server = OsmemServer.start(addr="127.0.0.1:0", japanese=False)
    except OsmemError as exc:
        component_unavailable("osmem-server", str(exc))
    try:
        url = server.url
        _bulk(url, "logs-2026", ORDER_LOGS)
        _request("PUT", f"{url}/ecs-logs", json.dumps(ECS_MAPPING).encode())
        _bulk(
            url,
            "ecs-logs",
            [
                {"@timestamp": _ago(6), "log": {"level": "warn"}, "service": {"name": "cart"},
                 "host": {"name": "cart-9"}, "message": "cart cache miss storm"},
                {"@timestamp": _ago(2), "log": {"level": "WARNING"}, "service": {"name": "cart"},
                 "message": "cart cache refilled"},
            ],
        )  # fmt: skip
        yield url
    finally:
        server.close()
