"""Edges of the real backends: credentials, TLS, timeouts, bounds, caches, errors, level labels.

The servers are real where one is installable: Prometheus 2.42 and Alertmanager 0.25 (Debian
packages; the session stack of ``tests/prometheus_kit.py``, and a second small Prometheus started
here whose exporter serves a latency histogram and process metrics, with alert rules whose
expressions are no plain comparison), and ``osmem-server`` for OpenSearch. Loki is the local
stand-in of ``tests/loki_kit.py`` (it implements Loki's documented answers; it is not Loki).

In front of them, small stand-ins defined here: a reverse proxy that records every request (and,
when asked, refuses one without the required headers), the same proxy speaking TLS with a
throw-away CA made by ``openssl``, and a server that accepts connections and never answers.
"""

from __future__ import annotations

import base64
import json
import shutil
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from evidence.composed import configured_backend
from evidence.config import load_settings
from persistence.ledger import InMemoryLedger
from state.records import Invocation
from tests import opensearch_kit
from tests.backend_kit import (
    QuietHandler,
    call_tool,
    evidence_refs,
    run_doctor,
    run_tool,
    serve_http,
    tool_runner,
)
from tests.components import component_unavailable
from tests.loki_kit import FakeLoki, Stream, serve_loki
from tests.prometheus_kit import (
    PROMETHEUS,
    Rule,
    Stack,
    _stop,
    alert_rules,
    free_port,
    start_exporter,
    start_prometheus,
    wait_alert_states,
    wait_samples,
    write_prometheus_config,
)
from tools import query_logs, query_metrics
from tools.runner import ToolRunner

SECRET = "edge-secret-7f31"


def _logs(env: Mapping[str, str], tmp_path: Path, args: Mapping[str, object]) -> Invocation:
    return run_tool(env, tmp_path, "query_logs", args)


def _metrics(env: Mapping[str, str], tmp_path: Path, args: Mapping[str, object]) -> Invocation:
    return run_tool(env, tmp_path, "query_metrics", args)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


# --- stand-ins: a recording (and checking) reverse proxy, TLS, a server that never answers ---


@dataclass
class Seen:
    """One request the proxy received."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    """Names lower-cased."""
    body: bytes


@dataclass
class Proxy:
    """A reverse proxy in front of a real server (a stand-in, not a product)."""

    target: str
    required: dict[str, str] = field(default_factory=dict)
    """Headers a request must carry (lower-cased names), else it is answered 401."""
    seen: list[Seen] = field(default_factory=list)
    url: str = ""
    """Where the proxy listens (set while it serves)."""

    def paths(self, prefix: str = "") -> list[str]:
        return [s.path for s in self.seen if s.path.startswith(prefix)]


def _proxy_handler(proxy: Proxy) -> type[BaseHTTPRequestHandler]:
    class Handler(QuietHandler):
        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            parts = urlsplit(self.path)
            headers = {k.lower(): v for k, v in self.headers.items()}
            proxy.seen.append(
                Seen(
                    self.command,
                    parts.path,
                    {k: v[-1] for k, v in parse_qs(parts.query).items()},
                    headers,
                    body,
                )
            )
            if any(headers.get(name) != value for name, value in proxy.required.items()):
                status, kind, answer = 401, "text/plain", b"Unauthorized\n"
            else:
                request = urllib.request.Request(
                    proxy.target + self.path,
                    data=body or None,
                    method=self.command,
                    headers={"Content-Type": headers.get("content-type", "application/json")},
                )
                try:
                    with urllib.request.urlopen(request, timeout=10) as reply:
                        status, answer = reply.status, reply.read()
                        kind = reply.headers.get("Content-Type", "application/json")
                except urllib.error.HTTPError as exc:
                    status, answer = exc.code, exc.read()
                    kind = exc.headers.get("Content-Type", "application/json")
            self.reply(status, answer, kind)

        do_GET = _forward  # noqa: N815 - the http.server names
        do_POST = _forward  # noqa: N815

    return Handler


class _TLSServer(ThreadingHTTPServer):
    """Each connection's TLS handshake runs in its own thread (a failed one ends only it)."""

    context: ssl.SSLContext

    def finish_request(self, request: Any, client_address: Any) -> None:
        try:
            wrapped = self.context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return  # the client refused the certificate: what the test checks
        super().finish_request(wrapped, client_address)


def _serve(proxy: Proxy, context: ssl.SSLContext | None = None) -> Iterator[str]:
    handler = _proxy_handler(proxy)
    server: ThreadingHTTPServer
    if context is None:
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    else:
        tls = _TLSServer(("127.0.0.1", 0), handler)
        tls.context = context
        server = tls
    yield from serve_http(server, "http" if context is None else "https")


def _proxy_fixture(target: str, required: Mapping[str, str] | None = None) -> Iterator[Proxy]:
    proxy = Proxy(target, dict(required or {}))
    for url in _serve(proxy):
        proxy.url = url
        yield proxy


@dataclass
class Silent:
    """A loopback server that accepts every connection and never sends a byte."""

    url: str
    accepted: list[socket.socket]


@pytest.fixture(scope="module")
def silent_server() -> Iterator[Silent]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            accepted.append(connection)  # held open, never read, never answered

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield Silent(f"http://127.0.0.1:{listener.getsockname()[1]}", accepted)
    finally:
        stop.set()
        listener.close()
        for connection in accepted:
            connection.close()


@dataclass
class Certificates:
    """A throw-away CA and a server certificate it signed for 127.0.0.1."""

    ca: Path
    cert: Path
    key: Path


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    openssl = shutil.which("openssl")
    if openssl is None:
        component_unavailable("openssl", "apt-get install -y openssl")
    root = tmp_path_factory.mktemp("tls")
    ca, ca_key = root / "ca.pem", root / "ca.key"
    cert, key, csr = root / "server.pem", root / "server.key", root / "server.csr"
    extensions = root / "server.ext"
    extensions.write_text(
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
        "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n"
    )
    for command in (
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key,
         "-out", ca, "-days", "2", "-subj", "/CN=superbiz edge test CA",
         "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        [openssl, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr,
         "-subj", "/CN=127.0.0.1"],
        [openssl, "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
         "-out", cert, "-days", "2", "-extfile", extensions],
    ):  # fmt: skip
        subprocess.run([str(part) for part in command], check=True, capture_output=True)
    return Certificates(ca, cert, key)


# --- a second small Prometheus: a histogram, process metrics, rules without a plain threshold --

EDGE_RULES = alert_rules(
    "edge",
    [
        Rule(
            "CheckoutMemoryHigh",
            "process_resident_memory_bytes > 128 * 1024 * 1024",
            "checkout resident memory above 128 MiB",
        ),
        Rule(
            "CheckoutBusy",
            "process_resident_memory_bytes > 1 and process_cpu_seconds_total > 0",
            "checkout busy",
        ),
    ],
)

CHECKOUT_MEMORY = 268435456.0
CHECKOUT_CPU_RATE = 0.25


class CheckoutCollector(Collector):
    """checkout-service: every request in the (0.25 s, 0.5 s] bucket, a quarter core, 256 MiB."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def collect(self) -> Iterable[Any]:
        elapsed = time.monotonic() - self.started
        requests = 10.0 * elapsed
        latency = HistogramMetricFamily(
            "http_request_duration_seconds", "request latency", labels=["service"]
        )
        latency.add_metric(
            ["checkout-service"],
            buckets=[("0.25", 0.0), ("0.5", requests), ("1.0", requests), ("+Inf", requests)],
            sum_value=0.4 * requests,
        )
        yield latency
        cpu = CounterMetricFamily("process_cpu_seconds", "CPU time", labels=["service"])
        cpu.add_metric(["checkout-service"], CHECKOUT_CPU_RATE * elapsed)
        yield cpu
        memory = GaugeMetricFamily("process_resident_memory_bytes", "RSS", labels=["service"])
        memory.add_metric(["checkout-service"], CHECKOUT_MEMORY)
        yield memory


@pytest.fixture(scope="module")
def edge_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Prometheus scraping ``CheckoutCollector`` every second, both edge alerts firing."""
    if shutil.which(PROMETHEUS) is None:
        component_unavailable(PROMETHEUS, "apt-get install -y prometheus")
    root = tmp_path_factory.mktemp("edge-prometheus")
    exporter_port, exporter = start_exporter(CheckoutCollector())
    write_prometheus_config(root, EDGE_RULES, "checkout", exporter_port)
    port = free_port()
    prometheus = start_prometheus(root, port, root / "tsdb")
    url = f"http://127.0.0.1:{port}"
    try:
        firing = {"CheckoutMemoryHigh": "firing", "CheckoutBusy": "firing"}
        wait_alert_states("edge alerts firing", url, firing, prometheus)
        # enough samples for every rate over 5 minutes at the end
        wait_samples("four scrapes", url, "process_resident_memory_bytes[1m]", 4, prometheus)
        yield url
    finally:
        _stop(prometheus)
        exporter.shutdown()


# --- Prometheus ----------------------------------------------------------------------------------


@pytest.fixture
def prometheus_proxy(prometheus_stack: Stack) -> Iterator[Proxy]:
    yield from _proxy_fixture(prometheus_stack.prometheus_url)


@pytest.fixture
def tenant_proxy(prometheus_stack: Stack) -> Iterator[Proxy]:
    yield from _proxy_fixture(prometheus_stack.prometheus_url, {"x-scope-orgid": "team-a"})


def test_prometheus_headers_are_sent_on_every_request(tenant_proxy: Proxy, tmp_path: Path) -> None:
    headers = {"X-Scope-OrgID": "team-a", "X-Edge-Trace": SECRET}
    env = {"SUPERBIZ_PROMETHEUS_URL": tenant_proxy.url}
    refused = _metrics(env, tmp_path, {"service": "order-service"})
    assert refused["status"] == "error"
    assert "HTTP 401" in str(refused["error"])  # the proxy does check the tenant
    tenant_proxy.seen.clear()

    env["SUPERBIZ_PROMETHEUS_HEADERS"] = json.dumps(headers)
    backend = configured_backend(load_settings(env, cwd=tmp_path))
    row = call_tool(
        ToolRunner(backend, InMemoryLedger()), "query_metrics", {"service": "order-service"}
    )
    reports = backend.checks()  # type: ignore[attr-defined]

    assert row["status"] == "ok", row["error"]
    assert [a["alert_name"] for a in query_metrics.result(row["output"])["alerts"]] == [
        "HighErrorRate",
        "QueueBacklog",
    ]
    assert reports[0]["status"] == "ok", reports
    paths = set(tenant_proxy.paths())
    assert {
        "/api/v1/rules",
        "/api/v1/alerts",
        "/api/v1/query_range",
        "/api/v1/label/service/values",
        "/api/v1/status/buildinfo",
        "/api/v1/query",
    } <= paths
    for seen in tenant_proxy.seen:
        assert (seen.headers.get("x-scope-orgid"), seen.headers.get("x-edge-trace")) == (
            "team-a",
            SECRET,
        ), seen.path


@pytest.fixture(scope="module")
def tls_prometheus(prometheus_stack: Stack, certificates: Certificates) -> Iterator[str]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certificates.cert, certificates.key)
    yield from _serve(Proxy(prometheus_stack.prometheus_url), context)


@pytest.mark.filterwarnings("error::DeprecationWarning")  # httpx deprecates verify=<path>
def test_prometheus_over_tls_with_the_ca_file(
    tls_prometheus: str, certificates: Certificates, tmp_path: Path
) -> None:
    env = {
        "SUPERBIZ_PROMETHEUS_URL": tls_prometheus,
        "SUPERBIZ_PROMETHEUS_CA_FILE": str(certificates.ca),
    }
    row = _metrics(env, tmp_path, {"service": "order-service"})
    assert tls_prometheus.startswith("https://")
    assert row["status"] == "ok", row["error"]
    assert len(query_metrics.result(row["output"])["alerts"]) == 2


def test_prometheus_over_tls_without_the_ca_is_an_error_naming_the_setting(
    tls_prometheus: str, tmp_path: Path
) -> None:
    row = _metrics(
        {"SUPERBIZ_PROMETHEUS_URL": tls_prometheus}, tmp_path, {"service": "order-service"}
    )
    assert row["status"] == "error"
    assert row["retrieval_details"]["evidence_refs"] == []
    error = str(row["error"])
    assert f"Prometheus at {tls_prometheus}: TLS verification failed" in error
    assert "CERTIFICATE_VERIFY_FAILED" in error
    assert "set SUPERBIZ_PROMETHEUS_CA_FILE or SUPERBIZ_PROMETHEUS_INSECURE=1" in error
    assert error.endswith("check SUPERBIZ_PROMETHEUS_CA_FILE")


def test_prometheus_ca_file_that_is_no_pem_bundle_is_an_error_naming_the_setting(
    tls_prometheus: str, tmp_path: Path
) -> None:
    bundle = tmp_path / "ca.pem"
    bundle.write_text("not a certificate\n")
    env = {"SUPERBIZ_PROMETHEUS_URL": tls_prometheus, "SUPERBIZ_PROMETHEUS_CA_FILE": str(bundle)}
    row = _metrics(env, tmp_path, {"service": "order-service"})

    assert row["status"] == "error"
    assert f"Prometheus at {tls_prometheus}: cannot load the CA bundle {bundle} (" in str(
        row["error"]
    )
    assert str(row["error"]).endswith("check SUPERBIZ_PROMETHEUS_CA_FILE")


def test_prometheus_over_tls_insecure_skips_verification(
    tls_prometheus: str, tmp_path: Path
) -> None:
    env = {"SUPERBIZ_PROMETHEUS_URL": tls_prometheus, "SUPERBIZ_PROMETHEUS_INSECURE": "1"}
    row = _metrics(env, tmp_path, {"service": "order-service"})
    assert row["status"] == "ok", row["error"]
    assert len(query_metrics.result(row["output"])["alerts"]) == 2


@pytest.mark.parametrize(
    ("credentials", "authorization"),
    [
        ({"SUPERBIZ_ALERTMANAGER_TOKEN": SECRET}, f"Bearer {SECRET}"),
        (
            {"SUPERBIZ_ALERTMANAGER_USER": "ops", "SUPERBIZ_ALERTMANAGER_PASSWORD": SECRET},
            _basic("ops", SECRET),
        ),
    ],
    ids=["bearer", "basic"],
)
def test_alertmanager_credentials_reach_an_auth_proxy(
    prometheus_stack: Stack,
    credentials: dict[str, str],
    authorization: str,
    tmp_path: Path,
) -> None:
    for proxy in _proxy_fixture(
        prometheus_stack.alertmanager_url, {"authorization": authorization}
    ):
        base = {
            "SUPERBIZ_PROMETHEUS_URL": prometheus_stack.prometheus_url,
            "SUPERBIZ_ALERTMANAGER_URL": proxy.url,
        }
        wrong = {k: v + "-wrong" if not k.endswith("_USER") else v for k, v in credentials.items()}
        refused = _metrics({**base, **wrong}, tmp_path, {"service": "x"})
        row = _metrics({**base, **credentials}, tmp_path, {"service": "order-service"})

        assert refused["status"] == "error"
        assert "Alertmanager at" in str(refused["error"])
        assert "HTTP 401, the credentials were refused" in str(refused["error"])
        assert SECRET not in str(refused["error"])
        assert row["status"] == "ok", row["error"]
        states = [
            (a["alert_name"], a["state"]) for a in query_metrics.result(row["output"])["alerts"]
        ]
        assert states == [("HighErrorRate", "firing"), ("QueueBacklog", "inhibited")]
        accepted = [s for s in proxy.seen if s.headers.get("authorization") == authorization]
        assert accepted and {s.path for s in accepted} == {"/api/v2/alerts"}


TIMEOUT_CASES = [
    ("prometheus", "query_metrics", {"service": "order-service"}, "Prometheus"),
    ("alertmanager", "query_metrics", {"service": "order-service"}, "Alertmanager"),
    ("loki", "query_logs", {"service": "order-service"}, "Loki"),
    ("opensearch", "query_logs", {"service": "order-service"}, "OpenSearch"),
]


@pytest.mark.parametrize(
    ("backend", "tool", "args", "title"), TIMEOUT_CASES, ids=[c[0] for c in TIMEOUT_CASES]
)
def test_query_timeout_ends_a_call_to_a_server_that_never_answers(
    silent_server: Silent,
    backend: str,
    tool: str,
    args: dict[str, object],
    title: str,
    tmp_path: Path,
) -> None:
    env = {f"SUPERBIZ_{backend.upper()}_URL": silent_server.url, "SUPERBIZ_QUERY_TIMEOUT_S": "1"}
    runner = tool_runner(env, tmp_path)
    started = time.monotonic()
    row = call_tool(runner, tool, args)
    elapsed = time.monotonic() - started

    assert row["status"] == "error"
    assert str(row["error"]).endswith(
        f"{title} at {silent_server.url}: no answer within 1 s; "
        f"check SUPERBIZ_{backend.upper()}_URL"
    )
    assert 0.9 <= elapsed < 10, elapsed  # the 1 s setting, not the 20 s default


def test_without_log_or_runbook_source_real_metrics_never_serve_the_sample(
    prometheus_stack: Stack, tmp_path: Path
) -> None:
    sample = tool_runner({}, tmp_path)
    real = tool_runner({"SUPERBIZ_PROMETHEUS_URL": prometheus_stack.prometheus_url}, tmp_path)
    logs_args = {"service": "order-service"}
    knowledge_args = {"query": "connection pool timeout"}
    # the bundled sample does answer these, so an answer here would be the sample's
    assert call_tool(sample, "query_logs", logs_args)["status"] == "ok"
    assert call_tool(sample, "lookup_knowledge", knowledge_args)["status"] == "ok"

    logs = call_tool(real, "query_logs", logs_args, "e1")
    knowledge = call_tool(real, "lookup_knowledge", knowledge_args, "e2")
    metrics = call_tool(real, "query_metrics", {"service": "order-service"}, "e3")

    assert metrics["status"] == "ok", metrics["error"]
    for row, what, setting in (
        (logs, "log", "SUPERBIZ_LOKI_URL, SUPERBIZ_OPENSEARCH_URL or SUPERBIZ_LOG_FILES"),
        (knowledge, "runbook", "SUPERBIZ_RUNBOOKS"),
    ):
        assert row["status"] == "error"
        assert f"no {what} source is configured; set {setting} or pass --env FILE" in str(
            row["error"]
        )
        assert row["output"] is None
        assert row["retrieval_details"]["evidence_refs"] == []


@pytest.fixture
def checkout_metrics(edge_prometheus: str, tmp_path: Path) -> Invocation:
    """query_metrics for checkout-service against the edge Prometheus."""
    env = {"SUPERBIZ_PROMETHEUS_URL": edge_prometheus}
    return _metrics(env, tmp_path, {"service": "checkout-service"})


def test_alert_rules_without_a_plain_comparison_have_no_threshold(
    checkout_metrics: Invocation,
) -> None:
    row = checkout_metrics
    alerts = {a["alert_name"]: a for a in query_metrics.result(row["output"])["alerts"]}
    refs = evidence_refs(row)

    assert row["status"] == "ok", row["error"]
    assert set(alerts) == {"CheckoutBusy", "CheckoutMemoryHigh"}
    for alert in alerts.values():
        assert alert["state"] == "firing"
        assert alert["value"] == CHECKOUT_MEMORY
        assert "threshold" not in alert  # 128 * 1024 * 1024 and "... and ..." are not read
    texts = [text for path, text in refs.items() if path.startswith("alerts[")]
    assert len(texts) == 2 and all("threshold=" not in text for text in texts)
    assert all(" value=268435456 " in text for text in texts)


def test_standard_latency_and_saturation_queries_give_series(
    checkout_metrics: Invocation,
) -> None:
    row = checkout_metrics
    series = {s["metric"]: s for s in query_metrics.result(row["output"])["series"]}

    assert row["status"] == "ok", row["error"]
    p99 = series["latency_p99_seconds"]
    # every observation in (0.25, 0.5]: histogram_quantile interpolates 0.25 + 0.25 * 0.99
    assert (p99["labels"], p99["last"], p99["unit"]) == (
        {"service": "checkout-service"},
        0.4975,
        "s",
    )
    memory = series["memory_resident_bytes"]
    assert (memory["last"], memory["unit"]) == (CHECKOUT_MEMORY, "B")
    cpu = series["cpu_usage_cores"]
    assert cpu["labels"] == {"service": "checkout-service"}
    # a quarter core, but rate over 5 min of a few seconds of samples is below it
    assert 0 < cpu["last"] <= CHECKOUT_CPU_RATE
    texts = list(evidence_refs(row).values())
    assert any(t.startswith("latency_p99_seconds{service=checkout-service} ") for t in texts)
    assert "error_ratio" not in series  # no http_requests_total here: no series invented


def test_metrics_window_defaults_to_the_last_hour(prometheus_stack: Stack, tmp_path: Path) -> None:
    env = {"SUPERBIZ_PROMETHEUS_URL": prometheus_stack.prometheus_url}
    before = datetime.now(UTC).replace(microsecond=0)
    row = _metrics(env, tmp_path, {"promql": "up", "service": "none"})
    after = datetime.now(UTC)
    output = query_metrics.result(row["output"])

    assert row["status"] == "ok", row["error"]
    start = datetime.fromisoformat(output["window_start"].replace("Z", "+00:00"))
    end = datetime.fromisoformat(output["window_end"].replace("Z", "+00:00"))
    assert end - start == timedelta(hours=1)
    assert before <= end <= after
    assert (
        f"window={output['window_start']}/{output['window_end']}" in evidence_refs(row)["summary"]
    )


def test_promql_over_the_cap_is_refused_without_a_request(
    prometheus_proxy: Proxy, tmp_path: Path
) -> None:
    runner = tool_runner({"SUPERBIZ_PROMETHEUS_URL": prometheus_proxy.url}, tmp_path)
    longest = "vector(1)" + " " * (2000 - len("vector(1)"))
    row = call_tool(runner, "query_metrics", {"promql": longest + " ", "service": "none"}, "e1")

    assert row["status"] == "error"
    assert "promql is 2001 characters; at most 2000 are sent" in str(row["error"])
    assert prometheus_proxy.seen == []

    at_cap = call_tool(runner, "query_metrics", {"promql": longest, "service": "none"}, "e2")
    assert at_cap["status"] == "ok", at_cap["error"]
    assert any(s.query.get("query") == longest for s in prometheus_proxy.seen)


def test_prometheus_execution_error_is_quoted(prometheus_stack: Stack, tmp_path: Path) -> None:
    env = {"SUPERBIZ_PROMETHEUS_URL": prometheus_stack.prometheus_url}
    promql = "shard_queue_length + on() shard_queue_length"
    row = _metrics(env, tmp_path, {"promql": promql, "service": "none"})

    assert row["status"] == "error"
    assert row["retrieval_details"]["evidence_refs"] == []
    error = str(row["error"])
    assert "Prometheus answered HTTP 422: execution: " in error
    assert "many-to-many matching not allowed" in error


def test_service_list_is_cached_for_a_short_time(
    prometheus_proxy: Proxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {"SUPERBIZ_PROMETHEUS_URL": prometheus_proxy.url}
    backend = configured_backend(load_settings(env, cwd=tmp_path))
    runner = ToolRunner(backend, InMemoryLedger())
    services = ["cart-service", "inventory-service", "order-service", "payment-service"]

    assert backend.services() == services
    assert backend.services() == services
    assert call_tool(runner, "query_metrics", {"service": "order-service"})["status"] == "ok"
    assert prometheus_proxy.paths("/api/v1/label/") == ["/api/v1/label/service/values"]

    monkeypatch.setattr("evidence.prometheus.SERVICES_TTL_S", 0.0)  # the minute has passed
    assert backend.services() == services
    assert len(prometheus_proxy.paths("/api/v1/label/")) == 2


# --- Loki, OpenSearch, files -------------------------------------------------------------------

NOW = datetime.now(UTC).replace(microsecond=0)

AUTH_CASES = [
    ("TOKEN", {"TOKEN": SECRET}, "authorization", f"Bearer {SECRET}"),
    ("basic", {"USER": "ops", "PASSWORD": SECRET}, "authorization", _basic("ops", SECRET)),
    ("HEADERS", {"HEADERS": json.dumps({"X-Edge-Trace": SECRET})}, "x-edge-trace", SECRET),
]


def _auth_env(backend: str, url: str, suffixes: Mapping[str, str]) -> dict[str, str]:
    prefix = f"SUPERBIZ_{backend.upper()}_"
    return {prefix + "URL": url, **{prefix + key: value for key, value in suffixes.items()}}


def _loki_streams() -> list[Stream]:
    return [
        Stream(
            {"service": "order-service", "level": "error"},
            [(NOW - timedelta(minutes=3), "Cannot acquire connection from pool")],
        )
    ]


@pytest.mark.parametrize(
    ("suffixes", "header", "value"),
    [case[1:] for case in AUTH_CASES],
    ids=[case[0] for case in AUTH_CASES],
)
def test_loki_credentials_reach_the_server(
    suffixes: dict[str, str], header: str, value: str, tmp_path: Path
) -> None:
    fake = FakeLoki(streams=_loki_streams())
    for url in serve_loki(fake):
        row = _logs(_auth_env("loki", url, suffixes), tmp_path, {"service": "order-service"})
        assert row["status"] == "ok", row["error"]
        assert [e["message"] for e in query_logs.result(row["output"])["logs"]] == [
            "Cannot acquire connection from pool"
        ]
        paths = [r["path"] for r in fake.requests]
        assert "/loki/api/v1/query_range" in paths
        assert [h.get(header) for h in fake.headers] == [value] * len(paths)


@pytest.mark.parametrize(
    ("suffixes", "header", "value"),
    [case[1:] for case in AUTH_CASES],
    ids=[case[0] for case in AUTH_CASES],
)
def test_opensearch_credentials_reach_an_auth_proxy(
    opensearch_url: str, suffixes: dict[str, str], header: str, value: str, tmp_path: Path
) -> None:
    for proxy in _proxy_fixture(opensearch_url, {header: value}):
        refused = _logs(
            {"SUPERBIZ_OPENSEARCH_URL": proxy.url}, tmp_path, {"service": "order-service"}
        )
        assert refused["status"] == "error" and "HTTP 401" in str(refused["error"])
        proxy.seen.clear()

        env = _auth_env("opensearch", proxy.url, suffixes)
        row = _logs(env, tmp_path, {"service": "order-service", "level": "ERROR"})
        assert row["status"] == "ok", row["error"]
        assert query_logs.result(row["output"])["logs"][0]["message"] == "upstream reset by peer"
        assert {s.path for s in proxy.seen} == {"/logs-*/_mapping", "/logs-*/_search"}
        assert all(s.headers.get(header) == value for s in proxy.seen)


@pytest.mark.parametrize("label", ["severity", "detected_level"])
def test_loki_severity_and_detected_level_labels_serve_as_the_level(
    label: str, tmp_path: Path
) -> None:
    fake = FakeLoki(
        streams=[
            Stream(
                {"service": "billing-service", label: "ERROR"},
                [(NOW - timedelta(minutes=5), "charge failed: card processor unreachable")],
            ),
            Stream(
                {"service": "billing-service", label: "info"},
                [(NOW - timedelta(minutes=4), "charge accepted")],
            ),
        ]
    )
    for url in serve_loki(fake):
        runner = tool_runner({"SUPERBIZ_LOKI_URL": url}, tmp_path)
        errors = call_tool(runner, "query_logs", {"service": "billing-service", "level": "error"})
        every = call_tool(runner, "query_logs", {"service": "billing-service"}, "e2")

        assert errors["status"] == "ok", errors["error"]
        sent = [r["query"] for r in fake.requests if r["path"].endswith("query_range")]
        assert sent[0] == f'{{service="billing-service", {label}=~"(?i)(error|err|eror)"}}'
        assert [
            (e["level"], e["message"]) for e in query_logs.result(errors["output"])["logs"]
        ] == [("ERROR", "charge failed: card processor unreachable")]
        # the lines name no level: each entry's level is its stream's label
        assert [e["level"] for e in query_logs.result(every["output"])["logs"]] == ["info", "ERROR"]


def test_loki_streams_that_label_the_level_differently_are_all_queried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeLoki(
        streams=[
            Stream(
                {"service": "billing-service", "level": "ERROR"},
                [(NOW - timedelta(minutes=5), "charge failed: card processor unreachable")],
            ),
            Stream(
                {"service": "billing-service", "severity": "error"},
                [(NOW - timedelta(minutes=3), "refund failed: ledger locked")],
            ),
            Stream(
                {"service": "billing-service", "severity": "info"},
                [(NOW - timedelta(minutes=4), "charge accepted")],
            ),
        ]
    )
    for url in serve_loki(fake):
        runner = tool_runner({"SUPERBIZ_LOKI_URL": url}, tmp_path)
        errors = call_tool(runner, "query_logs", {"service": "billing-service", "level": "error"})
        code, out, _ = run_doctor(monkeypatch, {"SUPERBIZ_LOKI_URL": url})

        assert errors["status"] == "ok", errors["error"]
        sent = [r["query"] for r in fake.requests if r["path"].endswith("query_range")]
        pattern = '=~"(?i)(error|err|eror)"'
        assert sent[0] == f'{{service="billing-service"}} | level{pattern} or severity{pattern}'
        assert [
            (e["level"], e["message"]) for e in query_logs.result(errors["output"])["logs"]
        ] == [
            ("error", "refund failed: ledger locked"),
            ("ERROR", "charge failed: card processor unreachable"),
        ]
        assert "; level labels level, severity" in out, out


def _window_args(end: datetime) -> dict[str, object]:
    return {"start": _iso(end - timedelta(days=3)), "end": _iso(end)}


def test_loki_window_over_a_day_keeps_its_end(tmp_path: Path) -> None:
    end = NOW
    fake = FakeLoki(
        streams=[
            Stream(
                {"service": "order-service"},
                [
                    (end - timedelta(hours=23), "inside the last day"),
                    (end - timedelta(hours=25), "before the last day"),
                ],
            )
        ]
    )
    for url in serve_loki(fake):
        row = _logs(
            {"SUPERBIZ_LOKI_URL": url}, tmp_path, {"service": "order-service", **_window_args(end)}
        )
        query = next(r for r in fake.requests if r["path"].endswith("query_range"))

        assert row["status"] == "ok", row["error"]
        ns = 1_000_000_000
        assert int(query["end"]) == int(end.timestamp()) * ns
        assert int(query["end"]) - int(query["start"]) == 24 * 3600 * ns
        assert [e["message"] for e in query_logs.result(row["output"])["logs"]] == [
            "inside the last day"
        ]
        window = f"window={_iso(end - timedelta(hours=24))}/{_iso(end)}"
        assert window in evidence_refs(row)["summary"]


def test_opensearch_window_over_a_day_keeps_its_end(opensearch_url: str, tmp_path: Path) -> None:
    # the end lies so that the seeded error of three hours ago is 24.5 h before it
    end = opensearch_kit.NOW + timedelta(hours=24) - timedelta(minutes=150)
    for proxy in _proxy_fixture(opensearch_url):
        row = _logs(
            {"SUPERBIZ_OPENSEARCH_URL": proxy.url},
            tmp_path,
            {"service": "order-service", "level": "ERROR", **_window_args(end)},
        )
        search = next(s for s in proxy.seen if s.path.endswith("/_search"))
        body = json.loads(search.body)

        assert row["status"] == "ok", row["error"]
        ranges = [f["range"] for f in body["query"]["bool"]["filter"] if "range" in f]
        assert ranges[0]["@timestamp"]["gte"] == _iso(end - timedelta(hours=24))
        assert ranges[0]["@timestamp"]["lte"] == _iso(end)
        messages = [e["message"] for e in query_logs.result(row["output"])["logs"]]
        assert "upstream reset by peer" in messages
        assert "an error from three hours ago" not in messages
        window = f"window={_iso(end - timedelta(hours=24))}/{_iso(end)}"
        assert window in evidence_refs(row)["summary"]


def test_log_file_window_over_a_day_keeps_its_end(tmp_path: Path) -> None:
    end = NOW
    path = tmp_path / "api.jsonl"
    lines = [
        (end - timedelta(hours=25), "before the last day"),
        (end - timedelta(hours=23), "inside the last day"),
    ]
    path.write_text(
        "".join(
            json.dumps({"time": _iso(at), "level": "error", "msg": msg}) + "\n" for at, msg in lines
        )
    )
    row = _logs(
        {"SUPERBIZ_LOG_FILES": f"api={path}"}, tmp_path, {"service": "api", **_window_args(end)}
    )

    assert row["status"] == "ok", row["error"]
    assert [e["message"] for e in query_logs.result(row["output"])["logs"]] == [
        "inside the last day"
    ]
    window = f"window={_iso(end - timedelta(hours=24))}/{_iso(end)}"
    assert window in evidence_refs(row)["summary"]


def test_loki_parse_error_is_an_error_invocation_quoting_it(tmp_path: Path) -> None:
    said = "parse error at line 1, col 27: syntax error: unexpected IDENTIFIER, expecting STRING"
    fake = FakeLoki(streams=_loki_streams(), parse_error=said)
    for url in serve_loki(fake):
        row = _logs(
            {"SUPERBIZ_LOKI_URL": url}, tmp_path, {"service": "order-service", "query": "pool"}
        )
        assert row["status"] == "error"
        assert row["retrieval_details"]["evidence_refs"] == []
        assert f"Loki answered HTTP 400: {said}" in str(row["error"])


def test_loki_text_query_with_a_line_break_is_valid_logql(tmp_path: Path) -> None:
    fake = FakeLoki(
        streams=[
            Stream(
                {"service": "order-service"},
                [(NOW - timedelta(minutes=2), "Cannot acquire connection\ntimeout 30000 ms")],
            )
        ]
    )
    for url in serve_loki(fake):
        row = _logs(
            {"SUPERBIZ_LOKI_URL": url},
            tmp_path,
            {"service": "order-service", "query": "connection\ntimeout"},
        )
        assert row["status"] == "ok", row["error"]
        assert len(query_logs.result(row["output"])["logs"]) == 1
        sent = next(r["query"] for r in fake.requests if r["path"].endswith("query_range"))
        assert sent == '{service="order-service"} |~ "(?i)connection\\ntimeout"'
