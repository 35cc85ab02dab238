"""A real Prometheus and Alertmanager (Debian packages) with a small incident, for tests.

``prometheus_stack`` (session-scoped, shared by every test that uses it) starts, on free loopback
ports with their own temporary data directories:

- an exporter (``prometheus_client``) serving the live incident: order-service answers 30 % of
  its requests with 500 and has a queue backlog of 120; payment-service has a p99 latency of
  2.5 s and 7 retries queued; inventory-service is healthy; 30 ``shard_queue_length`` series;
- Prometheus 2.42 scraping it every second, with rules evaluated every second (``for: 0s``, so
  HighErrorRate, QueueBacklog and PaymentRetries fire within seconds; SlowPayments has
  ``for: 1h`` and stays pending), and data backfilled with ``promtool tsdb
  create-blocks-from openmetrics`` at fixed past offsets: a cart-service latency series with
  exact values and the ``ALERTS`` history of CartCheckoutSlow, which fired 40 to 20 minutes ago
  and is resolved now;
- Alertmanager 0.25 receiving Prometheus' alerts, with QueueBacklog inhibited by HighErrorRate
  (same service) and PaymentRetries silenced.

The fixture waits until every alert is in the state above. A missing binary skips the tests
(fails them in CI: ``tests.components.component_unavailable``).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from tests.components import component_unavailable

PROMETHEUS = "prometheus"
PROMTOOL = "promtool"
ALERTMANAGER = "prometheus-alertmanager"

CART_LATENCY = [0.2] * 10 + [1.8] * 5 + [0.4] * 26
"""cart_checkout_latency_seconds, one value a minute from 50 to 10 minutes ago."""

RULES = """
groups:
  - name: incident
    interval: 1s
    rules:
      - alert: HighErrorRate
        expr: >-
          sum by (service) (rate(http_requests_total{status=~"5.."}[5s]))
          / sum by (service) (rate(http_requests_total[5s])) > 0.05
        for: 0s
        labels: {severity: critical}
        annotations: {summary: "5xx ratio above 5%"}
      - alert: QueueBacklog
        expr: order_queue_depth > 100
        for: 0s
        labels: {severity: warning}
        annotations: {summary: "order queue backlog above 100"}
      - alert: SlowPayments
        expr: payment_latency_p99_seconds > 1
        for: 1h
        labels: {severity: warning}
        annotations: {summary: "payment p99 latency above 1s"}
      - alert: PaymentRetries
        expr: payment_retry_queue >= 5
        for: 0s
        labels: {severity: warning}
        annotations: {summary: "payment retries queued"}
      - alert: CartCheckoutSlow
        expr: cart_checkout_latency_seconds > 1
        for: 0s
        labels: {severity: warning}
        annotations: {summary: "cart checkout slower than 1s"}
"""

ALERTMANAGER_CONFIG = """
route:
  receiver: blackhole
  group_wait: 1s
receivers:
  - name: blackhole
inhibit_rules:
  - source_matchers: ['severity="critical"']
    target_matchers: ['severity="warning"']
    equal: [service]
"""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def get_json(url: str, timeout: float = 5.0) -> Any:
    """GET a JSON document (test helper, loopback only)."""
    with urllib.request.urlopen(url, timeout=timeout) as answer:
        return json.loads(answer.read())


def post_json(url: str, body: object) -> Any:
    """POST a JSON document (test helper, loopback only)."""
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5) as answer:
        return json.loads(answer.read())


class IncidentCollector(Collector):
    """The live incident: counters grow at fixed rates from the collector's start."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def collect(self) -> Iterable[Any]:
        elapsed = time.monotonic() - self.started
        requests = CounterMetricFamily(
            "http_requests", "HTTP requests", labels=["service", "status"]
        )
        for service, status, rate in (
            ("order-service", "200", 7.0),
            ("order-service", "500", 3.0),
            ("payment-service", "200", 10.0),
            ("inventory-service", "200", 4.0),
        ):
            requests.add_metric([service, status], rate * elapsed)
        yield requests
        for name, service, value in (
            ("order_queue_depth", "order-service", 120.0),
            ("payment_latency_p99_seconds", "payment-service", 2.5),
            ("payment_retry_queue", "payment-service", 7.0),
        ):
            gauge = GaugeMetricFamily(name, name, labels=["service"])
            gauge.add_metric([service], value)
            yield gauge
        shards = GaugeMetricFamily("shard_queue_length", "queue per shard", labels=["shard"])
        for shard in range(30):
            shards.add_metric([f"{shard:02d}"], float(shard))
        yield shards


def backfill_text(now: float) -> str:
    """The OpenMetrics text promtool turns into past blocks (timestamps relative to ``now``)."""
    lines = ["# TYPE cart_checkout_latency_seconds gauge"]
    start = now - 50 * 60
    for minute, value in enumerate(CART_LATENCY):
        stamp = start + minute * 60
        lines.append(f'cart_checkout_latency_seconds{{service="cart-service"}} {value} {stamp:.0f}')
    lines.append("# TYPE ALERTS gauge")
    for minute in range(21):
        stamp = now - 40 * 60 + minute * 60
        lines.append(
            'ALERTS{alertname="CartCheckoutSlow",alertstate="firing",service="cart-service",'
            f'severity="warning"}} 1 {stamp:.0f}'
        )
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


@dataclass
class Stack:
    """The running servers."""

    prometheus_url: str
    alertmanager_url: str
    exporter_port: int
    started_at: float


def _wait(what: str, check: Any, timeout: float, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what}: the server exited with {process.returncode}")
        try:
            if check():
                return
        except (OSError, ValueError) as exc:
            last = exc
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not happen within {timeout:g} s (last error: {last})")


def _alert_states(url: str) -> dict[str, str]:
    data = get_json(f"{url}/api/v1/alerts")["data"]["alerts"]
    return {a["labels"]["alertname"]: a["state"] for a in data}


def _start(command: list[str], log: Path) -> subprocess.Popen[bytes]:
    handle = log.open("wb")
    return subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="session")
def prometheus_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Exporter, Prometheus (with backfilled history) and Alertmanager, alerts in place."""
    for binary in (PROMETHEUS, PROMTOOL, ALERTMANAGER):
        if shutil.which(binary) is None:
            component_unavailable(
                binary,
                f"{binary} is not on PATH; apt-get install -y prometheus prometheus-alertmanager",
            )
    root = tmp_path_factory.mktemp("prometheus-stack")
    now = time.time()
    registry = CollectorRegistry()
    registry.register(IncidentCollector())
    exporter_port = free_port()
    exporter, _ = start_http_server(exporter_port, addr="127.0.0.1", registry=registry)

    data = root / "tsdb"
    data.mkdir()
    (root / "backfill.om").write_text(backfill_text(now))
    subprocess.run(
        [PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(root / "backfill.om"), data],
        check=True,
        capture_output=True,
        timeout=60,
    )
    am_port, prom_port = free_port(), free_port()
    (root / "rules.yml").write_text(RULES)
    (root / "alertmanager.yml").write_text(ALERTMANAGER_CONFIG)
    (root / "prometheus.yml").write_text(
        json.dumps(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(root / "rules.yml")],
                "alerting": {
                    "alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]
                },
                "scrape_configs": [
                    {
                        "job_name": "incident",
                        "static_configs": [{"targets": [f"127.0.0.1:{exporter_port}"]}],
                    }
                ],
            }
        )
    )
    (root / "am-data").mkdir()
    alertmanager = _start(
        [
            ALERTMANAGER,
            f"--config.file={root / 'alertmanager.yml'}",
            f"--storage.path={root / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{am_port}",
            "--cluster.listen-address=",
        ],
        root / "alertmanager.log",
    )
    prometheus = _start(
        [
            PROMETHEUS,
            f"--config.file={root / 'prometheus.yml'}",
            f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
        root / "prometheus.log",
    )
    prom_url, am_url = f"http://127.0.0.1:{prom_port}", f"http://127.0.0.1:{am_port}"
    try:
        _wait("Alertmanager ready", lambda: get_json(f"{am_url}/api/v2/status"), 30, alertmanager)
        starts = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 60))
        ends = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + 3600))
        post_json(
            f"{am_url}/api/v2/silences",
            {
                "matchers": [{"name": "alertname", "value": "PaymentRetries", "isRegex": False}],
                "startsAt": starts,
                "endsAt": ends,
                "createdBy": "tests",
                "comment": "retries are expected during the drill",
            },
        )
        expected = {
            "HighErrorRate": "firing",
            "QueueBacklog": "firing",
            "PaymentRetries": "firing",
            "SlowPayments": "pending",
        }
        _wait("alerts firing", lambda: _alert_states(prom_url) == expected, 60, prometheus)

        def settled() -> bool:  # enough scrapes that every rate over 5 s has its samples
            query = "count_over_time(order_queue_depth[10s])"
            result = get_json(f"{prom_url}/api/v1/query?query={query}")["data"]["result"]
            return bool(result) and float(result[0]["value"][1]) >= 7

        _wait("seven scrapes", settled, 30, prometheus)

        def delivered() -> bool:
            names = {a["labels"]["alertname"] for a in get_json(f"{am_url}/api/v2/alerts")}
            return names >= {"HighErrorRate", "QueueBacklog", "PaymentRetries"}

        _wait("alerts in Alertmanager", delivered, 30, alertmanager)
        yield Stack(prom_url, am_url, exporter_port, now)
    finally:
        _stop(prometheus)
        _stop(alertmanager)
        exporter.shutdown()
