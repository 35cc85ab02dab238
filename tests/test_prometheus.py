"""query_metrics, doctor and /healthz against a real Prometheus 2.42 and Alertmanager 0.25.

The servers are the Debian packages, started once per test session by ``prometheus_stack``
(``tests/prometheus_kit.py``): live alerts from an exporter, exact past values backfilled with
promtool. The auth proxy and the VictoriaMetrics answer are local stand-ins, said so below.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import re
import urllib.request
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from apps.cli.main import main
from evidence.composed import configured_backend
from evidence.config import load_settings
from persistence.audit import verifier_evaluation_of
from persistence.store import open_persistence
from state.records import Invocation
from tests.backend_kit import (
    QuietHandler,
    call_tool,
    evidence_refs,
    get_healthz,
    run_doctor,
    serve_handler,
    tool_runner,
)
from tests.prometheus_kit import CART_LATENCY, Stack, free_port
from tools import query_metrics
from tools.points import MAX_POINTS
from tools.runner import ToolRunner

TOKEN = "prom-token-5b8e-secret"
PASSWORD = "prom-pass-0c41-secret"


def _call(runner: ToolRunner, args: Mapping[str, object], call_id: str = "m1") -> Invocation:
    return call_tool(runner, "query_metrics", args, call_id)


def _query(env: dict[str, str], tmp_path: Path, args: Mapping[str, object]) -> Invocation:
    """One query_metrics call on a fresh runner over ``env``."""
    return _call(tool_runner(env, tmp_path), args)


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _assert_order_service_alerts(refs: dict[str, str], active_at: str, backlog: str) -> None:
    """The two alerts of order-service, as their refs state them.

    alerts[0] is HighErrorRate, firing at 0.3 over 0.05 since a time matching ``active_at``;
    alerts[1] is QueueBacklog at 120 over 100 in state ``backlog``.
    """
    assert re.fullmatch(
        r"HighErrorRate service=order-service severity=critical state=firing value=0\.3 "
        rf"threshold=0\.05 active_at={active_at}: 5xx ratio above 5%",
        refs["alerts[0]"],
    )
    assert refs["alerts[1]"].startswith(
        f"QueueBacklog service=order-service severity=warning state={backlog} value=120 "
        "threshold=100 active_at="
    )


@pytest.fixture
def prom_env(prometheus_stack: Stack) -> dict[str, str]:
    return {"SUPERBIZ_PROMETHEUS_URL": prometheus_stack.prometheus_url}


# --- alerts ----------------------------------------------------------------------------------


def test_prometheus_firing_alerts_with_values_thresholds_and_exact_refs(
    prom_env: dict[str, str], tmp_path: Path
) -> None:
    row = _query(prom_env, tmp_path, {"service": "order-service"})
    refs = evidence_refs(row)

    assert row["status"] == "ok", row["error"]
    _assert_order_service_alerts(refs, r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "firing")
    assert "alerts[2]" not in refs
    series = [text for path, text in refs.items() if path.startswith("series[")]
    # the measured side of each firing alert's expression, then the standard queries with data
    assert any(
        t.startswith('sum by (service) (rate(http_requests_total{status=~"5.."}[5s]))')
        and "{service=order-service} min=0.3 max=0.3 last=0.3 points=" in t
        for t in series
    ), series
    assert any(t.startswith("order_queue_depth{instance=") and "min=120 " in t for t in series)
    assert any(t.startswith("error_ratio{service=order-service} min=0.3 max=0.3") for t in series)
    summary = refs["summary"]
    assert re.fullmatch(
        r"query_metrics service=order-service window=\S+Z/\S+Z alerts 2 of 2, "
        rf"series {len(series)} of {len(series)} \(complete\)",
        summary,
    )


def test_prometheus_pending_alert_is_pending_and_service_filter_is_exact(
    prom_env: dict[str, str], tmp_path: Path
) -> None:
    row = _query(prom_env, tmp_path, {"service": "payment-service"})
    alerts = {a["alert_name"]: a for a in query_metrics.result(row["output"]).get("alerts", [])}

    assert set(alerts) == {"PaymentRetries", "SlowPayments"}
    assert alerts["SlowPayments"]["state"] == "pending"
    assert (alerts["SlowPayments"]["value"], alerts["SlowPayments"]["threshold"]) == (2.5, 1)
    assert alerts["PaymentRetries"]["state"] == "firing"
    assert alerts["PaymentRetries"]["threshold"] == 5
    # firing first, then pending
    assert [a["state"] for a in query_metrics.result(row["output"])["alerts"]] == [
        "firing",
        "pending",
    ]


def test_prometheus_alert_that_fired_in_the_window_is_resolved(
    prometheus_stack: Stack, prom_env: dict[str, str], tmp_path: Path
) -> None:
    row = _query(prom_env, tmp_path, {"service": "cart-service"})
    alerts = query_metrics.result(row["output"]).get("alerts", [])

    assert [(a["alert_name"], a["state"]) for a in alerts] == [("CartCheckoutSlow", "resolved")]
    assert alerts[0]["threshold"] == 1
    assert alerts[0]["summary"] == "cart checkout slower than 1s"
    fired = prometheus_stack.started_at - 40 * 60
    active_at = datetime.fromisoformat(alerts[0]["active_at"].replace("Z", "+00:00"))
    assert fired - 1 <= active_at.timestamp() <= fired + 30
    assert "value" not in alerts[0]  # nothing is made up for an alert that is over


def test_prometheus_alert_filter_is_a_substring_of_the_name(
    prom_env: dict[str, str], tmp_path: Path
) -> None:
    row = _query(prom_env, tmp_path, {"alert": "queue"})
    assert [a["alert_name"] for a in query_metrics.result(row["output"])["alerts"]] == [
        "QueueBacklog"
    ]
    assert query_metrics.result(row["output"])["series"] == []


# --- series ----------------------------------------------------------------------------------


def test_prometheus_promql_series_min_max_last_are_computed_from_the_points(
    prometheus_stack: Stack, prom_env: dict[str, str], tmp_path: Path
) -> None:
    start, end = _iso(prometheus_stack.started_at - 55 * 60), _iso(prometheus_stack.started_at)
    promql = 'cart_checkout_latency_seconds{service="cart-service"}'
    row = _query(
        prom_env,
        tmp_path,
        {"promql": promql, "start": start, "end": end, "service": "cart-service"},
    )
    refs = evidence_refs(row)

    # 41 samples a minute apart, seen for 5 more minutes (lookback), at 12 s steps (55 min / 299)
    match = re.fullmatch(
        r"cart_checkout_latency_seconds\{service=cart-service\} "
        r"min=0\.2s max=1\.8s last=0\.4s points=(\d+)",
        refs["series[0]"],
    )
    assert match, refs["series[0]"]
    expected_points = ((len(CART_LATENCY) - 1) * 60 + 5 * 60) // 12
    assert abs(int(match.group(1)) - expected_points) <= 2
    assert refs["summary"].endswith(f"window={start}/{end} alerts 1 of 1, series 1 of 1 (complete)")
    # the points are kept for charts, bounded, with the extremes and the last among them
    points = query_metrics.result(row["output"])["series"][0]["points"]
    values = [value for _, value in points]
    assert len(points) == MAX_POINTS < int(match.group(1))
    assert (min(values), max(values), values[-1]) == (0.2, 1.8, 0.4)
    assert [t for t, _ in points] == sorted(t for t, _ in points)
    assert start <= _iso(points[0][0]) and _iso(points[-1][0]) <= end


def test_prometheus_counter_selector_is_shown_as_a_rate(
    prom_env: dict[str, str], tmp_path: Path
) -> None:
    promql = 'http_requests_total{service="order-service",status="500"}'
    row = _query(prom_env, tmp_path, {"promql": promql, "service": "order-service"})
    series = query_metrics.result(row["output"])["series"]

    assert len(series) == 1 and series[0]["unit"] == "/s"
    assert series[0]["metric"] == "http_requests_total"
    assert series[0]["last"] > 0  # rate over 5 min of a few seconds of data: below 3/s
    assert (
        evidence_refs(row)["series[0]"].startswith("http_requests_total{instance=")
        and "service=order-service,status=500} min=" in evidence_refs(row)["series[0]"]
    )


def test_prometheus_series_are_capped_and_the_summary_says_truncated(
    prom_env: dict[str, str], tmp_path: Path
) -> None:
    row = _query(prom_env, tmp_path, {"promql": "shard_queue_length", "service": "none"})
    output = query_metrics.result(row["output"])

    assert [s["labels"]["shard"] for s in output["series"]] == [f"{i:02d}" for i in range(20)]
    assert output["series_total"] == 30
    assert evidence_refs(row)["summary"].endswith("alerts 0 of 0, series 20 of 30 (truncated)")


def test_prometheus_window_is_capped_at_a_day_keeping_its_end(
    prometheus_stack: Stack, prom_env: dict[str, str], tmp_path: Path
) -> None:
    end = prometheus_stack.started_at
    args = {"promql": "up", "service": "none", "start": _iso(end - 3 * 86400), "end": _iso(end)}
    row = _query(prom_env, tmp_path, args)
    assert f"window={_iso(end - 86400)}/{_iso(end)}" in evidence_refs(row)["summary"]


def test_prometheus_empty_result_is_no_hit_never_an_error(
    prom_env: dict[str, str], tmp_path: Path
) -> None:
    row = _query(prom_env, tmp_path, {"service": "ghost-service", "promql": "nothing_x"})
    assert row["status"] == "no_hit"
    assert evidence_refs(row)["summary"].endswith("alerts 0 of 0, series 0 of 0 (complete)")


# --- services --------------------------------------------------------------------------------


def test_prometheus_services_are_the_service_label_values(
    prom_env: dict[str, str], tmp_path: Path
) -> None:
    backend = configured_backend(load_settings(prom_env, cwd=tmp_path))
    assert backend.services() == [
        "cart-service",
        "inventory-service",
        "order-service",
        "payment-service",
    ]
    labelled = configured_backend(
        load_settings({**prom_env, "SUPERBIZ_SERVICE_LABEL": "team,job"}, cwd=tmp_path)
    )
    assert labelled.services() == ["incident"]  # no team label: the job label is next


# --- errors ----------------------------------------------------------------------------------


def test_prometheus_promql_syntax_error_is_an_error_invocation_quoting_the_server(
    prom_env: dict[str, str], tmp_path: Path
) -> None:
    row = _query(prom_env, tmp_path, {"promql": "sum(rate(x[5m])", "service": "x"})
    assert row["status"] == "error"
    assert row["retrieval_details"]["evidence_refs"] == []
    assert "Prometheus answered HTTP 400: bad_data:" in str(row["error"])
    assert "parse error" in str(row["error"])


def test_prometheus_unreachable_is_an_error_invocation_and_a_doctor_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    row = _query({"SUPERBIZ_PROMETHEUS_URL": url}, tmp_path, {"service": "x"})
    assert row["status"] == "error"
    assert f"Prometheus at {url}: cannot connect" in str(row["error"])
    assert "check SUPERBIZ_PROMETHEUS_URL" in str(row["error"])

    code, out, err = run_doctor(monkeypatch, {"SUPERBIZ_PROMETHEUS_URL": url})
    assert code == 1
    assert re.match(rf"prometheus +FAIL +{re.escape(url)} .*cannot connect", out)
    assert "check SUPERBIZ_PROMETHEUS_URL" in err


RECORDED_VICTORIAMETRICS_422 = (
    b'{"status":"error","errorType":"422","error":"error when executing query=\\"sum(rate('
    b'http_requests_total[5m])\\" on the time range (start=1796120000000, end=1796123600000, '
    b'step=12000): cannot execute query: argList: unexpected token \\"\\"; want \\",\\", '
    b'\\")\\"; unparsed data: \\"\\""}'
)
"""Recorded from VictoriaMetrics 1.79.5 (Debian 12 package ``victoria-metrics``) for an
unbalanced ``query_range``: HTTP 422 with a numeric ``errorType``."""


class _Recorded(QuietHandler):
    """A stand-in replaying recorded VictoriaMetrics answers (not a real server)."""

    def do_GET(self) -> None:  # noqa: N802 - the http.server name
        if self.path.startswith("/api/v1/query_range"):
            status, body = 422, RECORDED_VICTORIAMETRICS_422
        elif self.path.startswith("/api/v1/rules"):
            status, body = 200, b'{"status":"success","data":{"groups":[]}}'
        else:
            status, body = 200, b'{"status":"success","data":{"alerts":[]}}'
        self.reply(status, body)


@pytest.fixture
def victoriametrics_replay() -> Iterator[str]:
    yield from serve_handler(_Recorded)


def test_prometheus_victoriametrics_422_error_is_quoted(
    victoriametrics_replay: str, tmp_path: Path
) -> None:
    runner = tool_runner({"SUPERBIZ_PROMETHEUS_URL": victoriametrics_replay}, tmp_path)
    row = _call(runner, {"promql": "sum(rate(http_requests_total[5m])", "service": "x"})
    assert row["status"] == "error"
    assert str(row["error"]).startswith(
        'BackendRequestError: Prometheus answered HTTP 422: error when executing query="sum('
    )
    assert "unexpected token" in str(row["error"])


# --- auth ------------------------------------------------------------------------------------


def _auth_proxy(target: str) -> type[BaseHTTPRequestHandler]:
    accepted = {
        f"Bearer {TOKEN}",
        "Basic " + base64.b64encode(f"ops:{PASSWORD}".encode()).decode(),
    }

    class Proxy(QuietHandler):
        """A small reverse proxy in front of the real Prometheus that checks credentials."""

        def do_GET(self) -> None:  # noqa: N802 - the http.server name
            if self.headers.get("Authorization") not in accepted:
                challenge = {"WWW-Authenticate": 'Basic realm="prometheus"'}
                self.reply(401, b"Unauthorized\n", None, challenge)
                return
            with urllib.request.urlopen(target + self.path, timeout=10) as answer:
                body, status = answer.read(), answer.status
            self.reply(status, body)

    return Proxy


@pytest.fixture
def auth_proxy(prometheus_stack: Stack) -> Iterator[str]:
    yield from serve_handler(_auth_proxy(prometheus_stack.prometheus_url))


@pytest.mark.parametrize(
    "credentials",
    [
        {"SUPERBIZ_PROMETHEUS_TOKEN": TOKEN},
        {"SUPERBIZ_PROMETHEUS_USER": "ops", "SUPERBIZ_PROMETHEUS_PASSWORD": PASSWORD},
    ],
    ids=["bearer", "basic"],
)
def test_prometheus_auth_proxy_accepts_the_configured_credentials(
    auth_proxy: str, credentials: dict[str, str], tmp_path: Path
) -> None:
    env = {"SUPERBIZ_PROMETHEUS_URL": auth_proxy, **credentials}
    row = _query(env, tmp_path, {"service": "order-service"})
    assert row["status"] == "ok", row["error"]
    assert len(query_metrics.result(row["output"])["alerts"]) == 2


@pytest.mark.parametrize(
    "credentials",
    [
        {"SUPERBIZ_PROMETHEUS_TOKEN": TOKEN + "-wrong"},
        {"SUPERBIZ_PROMETHEUS_USER": "ops", "SUPERBIZ_PROMETHEUS_PASSWORD": PASSWORD + "-wrong"},
    ],
    ids=["bearer", "basic"],
)
def test_prometheus_refused_credentials_say_which_setting_and_no_secret(
    auth_proxy: str,
    credentials: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    env = {"SUPERBIZ_PROMETHEUS_URL": auth_proxy, **credentials}
    runner = tool_runner(env, tmp_path)
    row = _call(runner, {"service": "order-service"})
    secrets = [value for key, value in credentials.items() if not key.endswith("_USER")]

    assert row["status"] == "error"
    assert "HTTP 401, the credentials were refused" in str(row["error"])
    setting = "SUPERBIZ_PROMETHEUS_TOKEN" if "TOKEN" in str(credentials) else "_PASSWORD"
    assert setting in str(row["error"])
    code, out, err = run_doctor(monkeypatch, env, as_json=True)
    assert code == 1
    assert json.loads(out)["backends"][0]["status"] == "error"
    recorded = json.dumps(row) + out + err + caplog.text
    for secret in secrets:
        assert secret not in recorded


# --- Alertmanager ----------------------------------------------------------------------------


@pytest.fixture
def am_env(prometheus_stack: Stack) -> dict[str, str]:
    return {
        "SUPERBIZ_PROMETHEUS_URL": prometheus_stack.prometheus_url,
        "SUPERBIZ_ALERTMANAGER_URL": prometheus_stack.alertmanager_url,
    }


def test_alertmanager_alerts_mark_inhibited_and_silenced(
    am_env: dict[str, str], tmp_path: Path
) -> None:
    runner = tool_runner(am_env, tmp_path)
    order = evidence_refs(_call(runner, {"service": "order-service"}, "a1"))
    payment = query_metrics.result(_call(runner, {"service": "payment-service"}, "a2")["output"])[
        "alerts"
    ]

    _assert_order_service_alerts(order, r"\S+Z", "inhibited")
    # Alertmanager only holds what Prometheus sent: the pending alert is not there
    assert [(a["alert_name"], a["state"]) for a in payment] == [("PaymentRetries", "silenced")]


def test_doctor_reports_prometheus_and_alertmanager_in_one_line_each(
    am_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, value in am_env.items():
        monkeypatch.setenv(name, value)
    assert main(["doctor"]) == 0
    lines = capsys.readouterr().out.splitlines()

    assert len(lines) == 2
    assert re.match(
        r"prometheus +ok +http://127\.0\.0\.1:\d+  version 2\.42\.\S+; query vector\(1\) ok; "
        r"label service: 4 services \(cart-service, inventory-service, order-service, ",
        lines[0],
    )
    assert re.match(r"alertmanager +ok +\S+  version 0\.25\.\S+; cluster \w+; 3 alerts", lines[1])


def test_healthz_reports_each_backend_without_failing_the_database(
    am_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in am_env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SUPERBIZ_ALERTMANAGER_URL", f"http://127.0.0.1:{free_port()}")
    status, body = get_healthz(tmp_path)

    assert status == 200
    assert (body["status"], body["database"]) == ("ok", "ok")
    assert body["backends"]["prometheus"]["status"] == "ok"
    assert body["backends"]["alertmanager"]["status"] == "error"
    assert "cannot connect" in body["backends"]["alertmanager"]["detail"]
    assert body["backends"]["alertmanager"]["setting"] == "SUPERBIZ_ALERTMANAGER_URL"


# --- end to end ------------------------------------------------------------------------------


def _diagnose(
    question: str, env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    db = f"sqlite:///{tmp_path / 'cli.sqlite'}"
    out = io.StringIO()
    monkeypatch.setattr("sys.stdout", out)
    assert main(["diagnose", "--offline", "--json", "--db", db, question]) == 0
    result = json.loads(out.getvalue())
    persistence = open_persistence(db)
    try:
        record = persistence.audit.get(str(result["diagnosis_id"]))
        assert record is not None
        evaluation = verifier_evaluation_of(record)
        assert evaluation is not None
        structured: Any = evaluation["executor_structured_output"]
        claims: list[dict[str, Any]] = structured["claims"]
    finally:
        persistence.close()
    return result, claims


def test_diagnose_offline_answers_from_real_alerts_with_pass(
    prom_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result, claims = _diagnose("order-service 为什么告警？", prom_env, tmp_path, monkeypatch)

    assert result["verdict"] == "PASS", result["answer"]
    bindings = [b for c in claims for b in c["evidence_bindings"]]
    bound = {(b["tool_name"], b["raw_path"]) for b in bindings}
    assert {("query_metrics", "alerts[0]"), ("query_metrics", "alerts[1]")} <= bound
    assert {tool for tool, _ in bound} == {"query_metrics"}
    answer = str(result["answer"])
    assert "HighErrorRate" in answer and "QueueBacklog" in answer
    assert "value=0.3" in answer and "threshold=0.05" in answer


def test_diagnose_offline_states_series_of_a_service_without_alerts(
    prom_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result, claims = _diagnose("inventory-service 的指标怎么样？", prom_env, tmp_path, monkeypatch)

    assert result["verdict"] == "PASS", result["answer"]
    paths = [b["raw_path"] for c in claims for b in c["evidence_bindings"]]
    assert paths and all(p.startswith("series[") for p in paths)
    assert "error_ratio{service=inventory-service} min=0 max=0 last=0" in str(result["answer"])


def test_secrets_never_reach_answers_or_audit_rows(
    auth_proxy: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {
        "SUPERBIZ_PROMETHEUS_URL": auth_proxy,
        "SUPERBIZ_PROMETHEUS_TOKEN": TOKEN,
        "SUPERBIZ_PROMETHEUS_HEADERS": json.dumps({"X-Scope-OrgID": PASSWORD}),
    }
    result, _ = _diagnose("order-service 为什么告警？", env, tmp_path, monkeypatch)
    assert result["verdict"] == "PASS"
    database = (tmp_path / "cli.sqlite").read_bytes()  # closed: everything written is in it
    for secret in (TOKEN, PASSWORD):
        assert secret.encode() not in database
        assert secret not in json.dumps(result)


def test_diagnose_offline_plans_against_a_service_only_the_server_knows(
    prom_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "incident" is no "*-service" token: only the job label's values name it
    env = {**prom_env, "SUPERBIZ_SERVICE_LABEL": "job"}
    result, claims = _diagnose("incident 为什么告警？", env, tmp_path, monkeypatch)

    persistence = open_persistence(f"sqlite:///{tmp_path / 'cli.sqlite'}")
    try:
        calls = persistence.ledger.list(str(result["diagnosis_id"]))
    finally:
        persistence.close()
    metrics = [c for c in calls if c["tool_name"] == "query_metrics"]
    assert metrics and metrics[0]["arguments"] == {"service": "incident"}
    assert metrics[0]["status"] == "ok"
    assert result["verdict"] == "PASS", result["answer"]
    assert claims and all("incident" in c["claim_text"] for c in claims)


# --- question kinds on the real server ---------------------------------------------------------

QUESTION_KINDS = [
    # (question, verdict, in the answer, never in the answer)
    ("What is the error ratio of order-service?", "PASS", ["0.3", "series["], ["PaymentRetries"]),
    ("payment-service 的 p99 延迟是多少？", "PASS", ["2.5s", "payment_latency_p99_seconds"], []),
    (
        "Is the HighErrorRate alert firing for order-service?",
        "PASS",
        ["HighErrorRate", "state=firing"],
        ["QueueBacklog", "PaymentRetries"],
    ),
    # A no for an alert the server does not have, never a PASS (as in the offline corpus).
    (
        "Is the DiskFull alert firing for order-service?",
        "LOW_CONFID",
        ["没有名为 DiskFull 的告警"],
        [],
    ),
    ("What is wrong?", "PASS", ["HighErrorRate", "PaymentRetries", "QueueBacklog"], []),
    ("billing-service 有告警吗？", "LOW_CONFID", ["billing-service", "请检查服务名称"], []),
]


@pytest.mark.parametrize(
    ("question", "verdict", "present", "absent"),
    QUESTION_KINDS,
    ids=["value", "value-pending-alert-measure", "yes", "no-such-alert", "overview", "unknown"],
)
def test_offline_question_kinds_answer_from_the_real_server(
    question: str,
    verdict: str,
    present: list[str],
    absent: list[str],
    prom_env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The offline rules answer what was asked from a real Prometheus: a value with its unit
    (also of a pending alert's measure), yes for a firing alert and nothing else, a no (never a
    PASS) for an alert name the server does not have, every firing alert for "what is wrong", and no
    health claim about a service the server does not know."""
    result, _ = _diagnose(question, prom_env, tmp_path, monkeypatch)

    answer = str(result["answer"])
    assert result["verdict"] == verdict, answer
    for text in present:
        assert text in answer, (text, answer)
    for text in absent:
        assert text not in answer, (text, answer)
