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
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

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


class Rule(NamedTuple):
    """One alerting rule of a test's rule file."""

    alert: str
    expr: str
    summary: str
    wait: str = "0s"
    """The rule's ``for``."""
    severity: str = "warning"


def alert_rules(group: str, rules: Sequence[Rule]) -> str:
    """A Prometheus rule file (JSON, which YAML reads) with one group evaluated every second."""
    return json.dumps(
        {
            "groups": [
                {
                    "name": group,
                    "interval": "1s",
                    "rules": [
                        {
                            "alert": rule.alert,
                            "expr": rule.expr,
                            "for": rule.wait,
                            "labels": {"severity": rule.severity},
                            "annotations": {"summary": rule.summary},
                        }
                        for rule in rules
                    ],
                }
            ]
        },
        indent=2,
    )


ERROR_RATIO_OVER_5_PERCENT = (
    'sum by (service) (rate(http_requests_total{status=~"5.."}[5s]))'
    " / sum by (service) (rate(http_requests_total[5s])) > 0.05"
)

INCIDENT_RULES = [
    Rule("HighErrorRate", ERROR_RATIO_OVER_5_PERCENT, "5xx ratio above 5%", severity="critical"),
    Rule("QueueBacklog", "order_queue_depth > 100", "order queue backlog above 100"),
    Rule("SlowPayments", "payment_latency_p99_seconds > 1", "payment p99 latency above 1s", "1h"),
    Rule("PaymentRetries", "payment_retry_queue >= 5", "payment retries queued"),
    Rule("CartCheckoutSlow", "cart_checkout_latency_seconds > 1", "cart checkout slower than 1s"),
]

RULES = alert_rules("incident", INCIDENT_RULES)

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


def start_exporter(collector: Collector) -> tuple[int, Any]:
    """Serve ``collector`` on a free loopback port: (the port, the server to shut down)."""
    registry = CollectorRegistry()
    registry.register(collector)
    port = free_port()
    exporter, _ = start_http_server(port, addr="127.0.0.1", registry=registry)
    return port, exporter


def write_prometheus_config(
    root: Path, rules: str, job: str, exporter_port: int, alertmanager_port: int | None = None
) -> None:
    """``rules.yml`` and ``prometheus.yml`` in ``root``: scrape and evaluate every second.

    Args:
        root: The folder.
        rules: The rule file's text.
        job: The scrape job's name.
        exporter_port: The loopback port the job scrapes.
        alertmanager_port: Where alerts are sent; None sends them nowhere.
    """
    (root / "rules.yml").write_text(rules)
    config: dict[str, Any] = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(root / "rules.yml")],
    }
    if alertmanager_port is not None:
        targets = [f"127.0.0.1:{alertmanager_port}"]
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": targets}]}]}
    config["scrape_configs"] = [
        {"job_name": job, "static_configs": [{"targets": [f"127.0.0.1:{exporter_port}"]}]}
    ]
    (root / "prometheus.yml").write_text(json.dumps(config))


def start_prometheus(root: Path, port: int, tsdb: Path) -> subprocess.Popen[bytes]:
    """Prometheus on ``port`` with ``root``'s ``prometheus.yml``, logging to its folder."""
    return _start(
        [
            PROMETHEUS,
            f"--config.file={root / 'prometheus.yml'}",
            f"--storage.tsdb.path={tsdb}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        root / "prometheus.log",
    )


def start_alertmanager(root: Path, port: int, config: str) -> subprocess.Popen[bytes]:
    """Alertmanager on ``port`` with ``config`` (written to ``root``), no cluster."""
    (root / "alertmanager.yml").write_text(config)
    (root / "am-data").mkdir()
    return _start(
        [
            ALERTMANAGER,
            f"--config.file={root / 'alertmanager.yml'}",
            f"--storage.path={root / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        root / "alertmanager.log",
    )


def wait_alert_states(
    what: str, url: str, expected: dict[str, str], process: subprocess.Popen[bytes]
) -> None:
    """Wait up to 60 s until Prometheus at ``url`` has exactly these alert states."""
    _wait(what, lambda: _alert_states(url) == expected, 60, process)


def wait_samples(
    what: str, url: str, selector: str, count: int, process: subprocess.Popen[bytes]
) -> None:
    """Wait up to 30 s until ``count_over_time(selector)`` reaches ``count`` (enough scrapes)."""

    def scraped() -> bool:
        query = f"count_over_time({selector})"
        result = get_json(f"{url}/api/v1/query?query={query}")["data"]["result"]
        return bool(result) and float(result[0]["value"][1]) >= count

    _wait(what, scraped, 30, process)


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
    exporter_port, exporter = start_exporter(IncidentCollector())

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
    write_prometheus_config(root, RULES, "incident", exporter_port, am_port)
    alertmanager = start_alertmanager(root, am_port, ALERTMANAGER_CONFIG)
    prometheus = start_prometheus(root, prom_port, data)
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
        wait_alert_states("alerts firing", prom_url, expected, prometheus)
        # enough scrapes that every rate over 5 s has its samples
        wait_samples("seven scrapes", prom_url, "order_queue_depth[10s]", 7, prometheus)

        def delivered() -> bool:
            names = {a["labels"]["alertname"] for a in get_json(f"{am_url}/api/v2/alerts")}
            return names >= {"HighErrorRate", "QueueBacklog", "PaymentRetries"}

        _wait("alerts in Alertmanager", delivered, 30, alertmanager)
        yield Stack(prom_url, am_url, exporter_port, now)
    finally:
        _stop(prometheus)
        _stop(alertmanager)
        exporter.shutdown()
