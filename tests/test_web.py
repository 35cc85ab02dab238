"""The web application in a real browser: Debian's Chromium driven by Playwright.

A live ``create_app`` server (uvicorn on a free loopback port, SQLite) holds diagnoses recorded
through the real graph with scripted models (PASS, LOW_CONFID after a retry, REJECT) and with the
offline rules (the bundled sample, whose series carry points; an environment with hostile log
lines). Screenshots of the pages are written to a temporary folder (``SUPERBIZ_SCREENSHOTS``
names another one), never into the checkout.
"""

from __future__ import annotations

import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.responses import JSONResponse

from apps.eval.evaluation import script_replies
from apps.eval.scenario import load_scenario
from apps.http.api import create_app
from apps.http.web import CSP
from evidence.environment import Environment, default_environment, load_environment
from evidence.sample import SampleBackend
from graph.compile import compile_graph
from graph.runner import run_diagnosis
from models.budget import GetModel
from models.factory import make_model_factory
from models.scripted import scripted_models
from persistence.ownership import ThreadOwners
from persistence.store import Persistence, open_persistence
from state.context import Context
from tests.components import component_unavailable
from tests.prometheus_kit import free_port

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "tests" / "scenarios"
CHROMIUM = "/usr/bin/chromium"
KEYS = {"key-alice": "alice", "key-bob": "bob", "key-carol": "carol"}
HOSTILE = [
    "<script>window.__pwned = 'script'</script> HTTP 500 from payment",
    "<img src=x onerror=\"window.__pwned = 'img'\"> HTTP 500 upstream reset",
]

playwright_sync = pytest.importorskip("playwright.sync_api")


@dataclass
class Site:
    url: str
    ids: dict[str, str]
    shots: Path
    alerts: _AlertsStandIn
    database: str


class _AlertsStandIn:
    """Answers ``GET /api/alerts`` with ``body`` when set, else leaves it to the app.

    The app's own list is empty here (no Alertmanager posts to this site); the body set by a test
    has the receiver's shape, so the history page's merging is checked without running alerts.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self.body: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self.body is not None and scope["type"] == "http" and scope["path"] == "/api/alerts":
            await JSONResponse(self.body)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _record(
    persistence: Persistence,
    owner: str,
    question: str,
    get_model: GetModel,
    environment: Environment,
    context: Context,
) -> str:
    graph = compile_graph(persistence, SampleBackend(environment), get_model=get_model)
    thread = f"web-{uuid.uuid4().hex[:12]}"
    assert ThreadOwners(persistence.db).claim(thread, owner)
    values = run_diagnosis(
        graph, thread_id=thread, context=context, audit=persistence.audit, question=question
    )
    return str(values["diagnosis_id"])


def _scenario(persistence: Persistence, name: str) -> str:
    scenario = load_scenario(SCENARIOS / f"{name}.json")
    return _record(
        persistence,
        "alice",
        scenario["question"],
        scripted_models(script_replies(scenario)),
        scenario["environment"],
        Context(language=scenario["language"], composer_mode="template"),
    )


def _offline(persistence: Persistence, question: str, environment: Environment) -> str:
    context = Context(offline=True, language="en")
    return _record(persistence, "alice", question, make_model_factory(), environment, context)


def _hostile_environment() -> Environment:
    env = default_environment()
    env["logs"] = [
        {
            "timestamp": f"2026-03-01T10:0{i + 1}:00Z",
            "level": "ERROR",
            "service": "order-service",
            "instance": "order-1",
            "message": message,
        }
        for i, message in enumerate(HOSTILE)
    ]
    return env


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with pytest.MonkeyPatch.context() as patch:
        for name in ("OPENAI_API_KEY", "SUPERBIZ_OFFLINE", "SUPERBIZ_API_KEYS"):
            patch.delenv(name, raising=False)
        patch.setenv("SUPERBIZ_API_RATE_PER_MIN", "100000")
        database = f"sqlite:///{tmp_path_factory.mktemp('web-db') / 'web.db'}"
        persistence = open_persistence(database, origin="api")
        try:
            ids = {
                "pass": _scenario(persistence, "pass-basic-zh"),
                "retry": _scenario(persistence, "retry-stays-low-confid-zh"),
                "reject": _scenario(persistence, "gk-excerpt-mismatch-zh"),
                "sample": _offline(
                    persistence, "Why does order-service return 500 errors?", default_environment()
                ),
                "hostile": _offline(
                    persistence, "Does order-service log errors?", _hostile_environment()
                ),
            }
        finally:
            persistence.close()
        port = free_port()
        alerts = _AlertsStandIn(create_app(database, api_keys=KEYS))
        config = uvicorn.Config(
            alerts,
            host="127.0.0.1",
            port=port,
            log_level="warning",
            lifespan="on",
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)
        shots = Path(os.environ.get("SUPERBIZ_SCREENSHOTS") or tmp_path_factory.mktemp("shots"))
        try:
            yield Site(f"http://127.0.0.1:{port}", ids, shots, alerts, database)
        finally:
            server.should_exit = True
            thread.join(30)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists() or shutil.which(CHROMIUM) is None:
        component_unavailable("Chromium", f"{CHROMIUM} is missing; apt-get install chromium")
    with playwright_sync.sync_playwright() as driver:
        launched = driver.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-background-networking", "--no-first-run"],
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1100, "height": 900})
    opened = context.new_page()
    problems: list[str] = []
    failed: list[str] = []
    opened.on(
        "console",
        lambda m: (
            problems.append(m.text)
            if m.type == "error" and not m.text.startswith("Failed to load resource")
            else None
        ),
    )
    opened.on("pageerror", lambda e: problems.append(str(e)))
    opened.on("response", lambda r: failed.append(r.url) if r.status >= 400 else None)
    opened.problems = problems  # console errors (CSP violations among them) and script errors
    opened.failed = failed  # URLs answered with an error status
    try:
        yield opened
    finally:
        context.close()


def _open(page: Any, site: Site, path: str, key: str | None = "key-alice") -> None:
    page.goto(f"{site.url}{path}" + (f"#key={key}" if key else ""))
    page.wait_for_selector("body[data-ready=true]")


def _record_of(site: Site, name: str, key: str = "key-alice") -> dict[str, Any]:
    response = httpx.get(
        f"{site.url}/api/diagnoses/{site.ids[name]}", headers={"X-API-Key": key}, timeout=10
    )
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


# --- serving -----------------------------------------------------------------------------------


def test_web_pages_and_assets_are_served_with_a_policy_that_allows_no_other_origin(
    site: Site,
) -> None:
    for path in ("/", "/history", f"/diagnoses/{site.ids['pass']}", "/assets/app.js"):
        response = httpx.get(f"{site.url}{path}", timeout=10)
        assert response.status_code == 200, path
        assert response.headers["content-security-policy"] == CSP
        assert response.headers["x-content-type-options"] == "nosniff"
    assert "http" not in CSP and "unsafe" not in CSP and "*" not in CSP
    for name in ("index.html", "app.js", "app.css", "icon.svg"):
        asset = (ROOT / "apps" / "http" / "webui" / name).read_text(encoding="utf-8")
        external = re.findall(r"https?://[^\s\"'`)]+", asset)
        assert set(external) <= {"http://www.w3.org/2000/svg"}, name
        assert "innerHTML" not in asset and "insertAdjacentHTML" not in asset
    assert httpx.get(f"{site.url}/assets/../api.py", timeout=10).status_code == 404
    assert httpx.get(f"{site.url}/assets/web.py", timeout=10).status_code == 404


# --- ask -----------------------------------------------------------------------------------


def test_web_ask_by_keyboard_shows_the_stages_then_the_answer(page: Any, site: Site) -> None:
    _open(page, site, "/")

    assert "#key" not in page.url
    assert page.evaluate("sessionStorage.getItem('superbiz.api_key')") == "key-alice"
    page.keyboard.type("Why does order-service return 500 errors?")
    page.keyboard.press("Tab")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")  # English
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "ask-button"
    page.keyboard.press("Enter")
    page.wait_for_selector("#answer", timeout=60_000)

    stages = page.locator("#stages li").all_inner_texts()
    assert stages[0].startswith("Intake: diagnosis diag-")
    assert "Planner (round 1): planning the evidence to gather" in stages
    assert any(re.fullmatch(r"Tool call inv-1 query_\w+: ok", s) for s in stages)
    assert "Gatekeeper (round 1): checking every binding against the evidence" in stages
    assert "Verifier (round 1): checking the claims" in stages
    # The root cause is an inference (0.6 each): the groundedness is below 1.
    assert any(re.fullmatch(r"Verdict \(round 1\): PASS, groundedness 0\.9\d", s) for s in stages)
    assert stages[-1] == "Done: PASS"
    answer = page.locator("#answer").inner_text()
    assert "OrderServiceHigh5xxRate" in answer and "Offline mode" in answer
    # Sections and lists are rendered, not shown as raw Markdown.
    assert page.locator("#answer h3").count() >= 2 and page.locator("#answer li").count() >= 2
    assert not any(line.startswith(("## ", "- ")) for line in answer.splitlines())
    assert re.fullmatch(r"PASS · 0\.9\d", page.locator("#answer-section .badge").inner_text())
    root = page.locator("#root-cause").inner_text()
    assert root.startswith("Most likely root cause (inferred): inventory-service: ")
    page.screenshot(path=str(site.shots / "ask.png"), full_page=True)
    page.click("#diagnosis-link")
    page.wait_for_selector("body[data-ready=true] #claims")
    assert (
        page.locator("#root-cause")
        .inner_text()
        .startswith("Most likely root cause (inferred): inventory-service: ")
    )
    assert page.locator("#suspects tbody tr").first.inner_text().startswith("1\tinventory-service")
    assert page.problems == []


def test_web_without_a_key_asks_for_one_and_keeps_it_for_the_session(page: Any, site: Site) -> None:
    _open(page, site, f"/diagnoses/{site.ids['pass']}", key=None)

    assert "missing API key" in page.locator("#key-form [role=alert]").inner_text()
    assert page.locator("#question").count() == 0
    page.fill("#api-key", "key-alice")
    page.keyboard.press("Enter")
    page.wait_for_selector("body[data-ready=true] #claims")
    assert page.evaluate("sessionStorage.getItem('superbiz.api_key')") == "key-alice"
    page.click("#forget-key")
    page.wait_for_selector("body[data-ready=true]")
    assert page.evaluate("sessionStorage.getItem('superbiz.api_key')") is None
    _open(page, site, "/", key="wrong-key")
    assert page.locator("#key-form [role=alert]").inner_text() == "invalid API key"
    assert page.locator("#ask-form").count() == 0


# --- diagnoses -------------------------------------------------------------------------------


def test_web_offline_diagnosis_names_the_claim_checker_and_renders_the_answer(
    page: Any, site: Site
) -> None:
    _open(page, site, f"/diagnoses/{site.ids['sample']}")

    reasons = page.locator("#reasons li").all_inner_texts()
    assert not any("Verifier model" in reason for reason in reasons)
    assert any(r.startswith("Offline mode: the deterministic claim checker") for r in reasons)
    assert page.locator("#answer h3").count() >= 2
    assert "## " not in page.locator("#answer").inner_text()
    assert page.problems == []


def test_web_pass_diagnosis_shows_labels_and_highlighted_excerpts(page: Any, site: Site) -> None:
    _open(page, site, f"/diagnoses/{site.ids['pass']}")

    assert page.locator("h1 + p + p .badge").inner_text() == "PASS · 1.00"
    reasons = page.locator("#reasons li").all_inner_texts()
    assert "The Verifier model said PASS." in reasons
    assert any(r.startswith("The claim checks give PASS") for r in reasons)
    assert "No cap applied (output valid, Gatekeeper passed, question answered)." in reasons
    row = page.locator("tr[data-claim=c1]")
    assert row.locator(".label").get_attribute("data-label") == "direct_observation"
    assert row.locator(".label").inner_text() == "confirmed: stated in the evidence"
    assert row.locator(".unconfirmed-mark").count() == 0
    record = _record_of(site, "pass")
    claim = record["self_evaluation"]["verifier_evaluation"]["executor_structured_output"][
        "claims"
    ][0]
    marks = row.locator(".ref mark").all_inner_texts()
    assert marks == [b["evidence_excerpt"] for b in claim["evidence_bindings"]]
    refs = row.locator(".ref").all_inner_texts()
    assert refs[0].startswith("2026-03-01T10:01:12Z ERROR order-service order-1: HTTP 500")
    assert row.locator(".binding.verified").count() == 2
    assert "query_logs · round 1 · status ok" in row.locator(".binding").first.inner_text()
    assert page.locator("#coverage").inner_text().count("status answered") == 1
    assert page.locator("#trace-table tbody tr").count() >= 1
    assert not re.search(
        r"\b(null|undefined|\[object Object\])\b", page.locator("main").inner_text()
    )
    page.screenshot(path=str(site.shots / "diagnosis-pass.png"), full_page=True)
    assert page.problems == []


def test_web_low_confid_after_retry_shows_both_rounds_and_unconfirmed_claims(
    page: Any, site: Site
) -> None:
    _open(page, site, f"/diagnoses/{site.ids['retry']}")

    assert page.locator("h1 + p + p .badge").inner_text() == "LOW_CONFID · 0.30"
    reasons = page.locator("#reasons li").all_inner_texts()
    assert any(r.startswith("Round 1 ended LOW_CONFID with groundedness 0.00") for r in reasons)
    rounds = page.locator("#rounds-table tbody tr").all_inner_texts()
    assert len(rounds) == 2 and "LOW_CONFID" in rounds[0] and "LOW_CONFID" in rounds[1]
    labels = page.locator("#claims .label").evaluate_all("els => els.map(e => e.dataset.label)")
    assert labels == ["reasonable_inference", "unsupported"]
    unconfirmed = page.locator("#claims tr.unconfirmed")
    assert unconfirmed.count() == 1
    assert "Not shown as confirmed" in unconfirmed.inner_text()
    assert "数据库索引缺失" in unconfirmed.inner_text()
    inferred = page.locator("#claims tr.confirmed")
    assert inferred.locator(".ref mark").count() >= 1
    assert page.locator("#retry-context").count() == 1
    invocation_rounds = page.locator("#invocations-table tbody tr td:nth-child(2)")
    assert set(invocation_rounds.all_inner_texts()) == {"1", "2"}
    page.screenshot(path=str(site.shots / "diagnosis-low-confid.png"), full_page=True)


def test_web_reject_diagnosis_shows_the_cap_and_the_failed_binding(page: Any, site: Site) -> None:
    _open(page, site, f"/diagnoses/{site.ids['reject']}")

    assert page.locator("h1 + p + p .badge").inner_text() == "REJECT · 0.00"
    reasons = page.locator("#reasons li").all_inner_texts()
    assert "The Verifier model said PASS." in reasons
    # The quoted text is in no evidence gathered, so the claim is fabricated as well.
    assert (
        "Capped at REJECT: the Gatekeeper failed a reject rule"
        " (evidence.excerpt_mismatch, evidence.fabricated)." in reasons
    )
    assert "The verdict is the strictest of these: REJECT." in reasons
    row = page.locator("#claims tr").nth(1)
    assert row.locator(".label").get_attribute("data-label") == "unsupported"
    assert "Not shown as confirmed" in row.inner_text()
    binding = row.locator(".binding.unverified")
    assert "not verified" in binding.inner_text()
    assert "error evidence.excerpt_mismatch" in binding.locator(".finding").inner_text()
    assert binding.locator("mark").count() == 0  # the excerpt is not in the ref: nothing to mark
    assert "evidence.excerpt_mismatch" in page.locator("#findings").inner_text()
    page.screenshot(path=str(site.shots / "diagnosis-reject.png"), full_page=True)


def test_web_hostile_log_lines_render_as_text(page: Any, site: Site) -> None:
    _open(page, site, f"/diagnoses/{site.ids['hostile']}")

    lines = page.locator("ol.loglines li").all_inner_texts()
    for hostile in HOSTILE:
        assert any(hostile in line for line in lines), hostile
    assert any("<script>" in ref for ref in page.locator(".ref").all_inner_texts())
    assert page.evaluate("window.__pwned") is None
    assert page.locator("img").count() == 0
    assert page.locator("script").count() == 1  # the page's own
    assert page.locator("ol.loglines li.cited").count() >= 1
    assert page.locator(".timeline svg line.tick.cited").count() >= 1
    assert page.problems == []


def test_web_chart_of_a_cited_series_marks_its_min_max_and_last(page: Any, site: Site) -> None:
    _open(page, site, f"/diagnoses/{site.ids['sample']}")
    record = _record_of(site, "sample")
    claims = record["self_evaluation"]["verifier_evaluation"]["executor_structured_output"][
        "claims"
    ]
    cited = next(
        (claim["claim_id"], b)
        for claim in claims
        for b in claim["evidence_bindings"]
        if b["raw_path"].startswith("series[")
    )
    invocation = next(
        i for i in record["invocations"] if i["invocation_id"] == cited[1]["source_invocation_id"]
    )
    series = invocation["output"]["series"][int(cited[1]["raw_path"][7:-1])]
    values = [v for _, v in series["points"]]

    figure = page.locator(f"tr[data-claim={cited[0]}] figure.chart").first
    svg = figure.locator("svg")
    assert svg.get_attribute("data-points") == str(len(values))
    unit = series.get("unit", "")
    assert svg.locator("text.chart-max").text_content() == f"max {max(values):g}{unit}"
    assert svg.locator("text.chart-min").text_content() == f"min {min(values):g}{unit}"
    assert svg.locator("text.chart-last").text_content() == f"last {values[-1]:g}{unit}"
    assert (max(values), min(values), values[-1]) == (series["max"], series["min"], series["last"])
    assert svg.locator("polyline.line").count() == 1
    assert svg.locator("line.threshold").count() == 1
    assert "threshold 0.05" in svg.locator("text.threshold-label").text_content()
    description = svg.get_attribute("aria-label")
    assert description.startswith(f"Line chart of {series['metric']}")
    assert f"max {max(values):g}{unit}" in description and svg.get_attribute("role") == "img"
    assert page.locator("#metrics figure.chart").count() >= len(invocation["output"]["series"])
    figure.scroll_into_view_if_needed()
    page.screenshot(path=str(site.shots / "diagnosis-chart.png"))


def test_web_narrow_screen_has_no_horizontal_scroll(browser: Any, site: Site) -> None:
    context = browser.new_context(viewport={"width": 360, "height": 800})
    try:
        narrow = context.new_page()
        for path in (f"/diagnoses/{site.ids['sample']}", "/", "/history"):
            _open(narrow, site, path)
            assert narrow.evaluate("document.documentElement.scrollWidth") <= 360, path
    finally:
        context.close()


# --- history and identities --------------------------------------------------------------------


def test_web_history_lists_newest_first_and_filters_by_verdict_and_service(
    page: Any, site: Site
) -> None:
    _open(page, site, "/history")  # GET /api/alerts answers, with no investigations

    items = page.locator("#history li[data-id]")
    ids = items.evaluate_all("els => els.map(e => e.dataset.id)")
    assert set(site.ids.values()) <= set(ids)
    assert ids.index(site.ids["hostile"]) < ids.index(site.ids["pass"])
    page.screenshot(path=str(site.shots / "history.png"), full_page=True)
    page.select_option("#filter-verdict", "REJECT")
    assert items.evaluate_all("els => els.map(e => e.dataset.id)") == [site.ids["reject"]]
    page.select_option("#filter-verdict", "")
    page.select_option("#filter-service", "checkout-service")
    assert items.evaluate_all("els => els.map(e => e.dataset.id)") == [site.ids["retry"]]
    assert page.problems == [] and page.failed == []


def test_web_history_includes_alert_investigations_when_the_endpoint_exists(
    page: Any, site: Site
) -> None:
    site.alerts.body = {
        "alerts": [
            {  # the shape GET /api/alerts answers (docs/contracts.md section 11)
                "group_key": '{}:{alertname="OrderServiceHigh5xxRate"}',
                "thread_id": "alert-1",
                "diagnosis_id": site.ids["reject"],
                "alerts": [{"alert_name": "OrderServiceHigh5xxRate", "service": "order-service"}],
                "status": "done",
                "verdict": "REJECT",
                "received_at": "2026-01-01T00:00:00Z",
            },
            {
                "group_key": '{}:{alertname="PaymentLatencyHigh"}',
                "thread_id": "alert-2",
                "diagnosis_id": "diag-queued",
                "alerts": [{"alert_name": "PaymentLatencyHigh", "service": "payment-service"}],
                "status": "queued",
                "verdict": None,
                "received_at": "2999-01-01T00:00:00Z",
            },
        ]
    }
    try:
        _open(page, site, "/history")
    finally:
        site.alerts.body = None

    items = page.locator("#history li[data-id]")
    assert items.first.get_attribute("data-id") == "diag-queued"
    assert "alert investigation: PaymentLatencyHigh" in items.first.inner_text()
    reject = page.locator(f"#history li[data-id={site.ids['reject']}]")
    assert reject.count() == 1
    assert "alert investigation: OrderServiceHigh5xxRate" in reject.inner_text()
    page.select_option("#filter-service", "payment-service")
    assert items.evaluate_all("els => els.map(e => e.dataset.id)") == ["diag-queued"]


def test_web_history_reads_a_bounded_number_of_the_newest_threads(page: Any, site: Site) -> None:
    persistence = open_persistence(site.database, origin="api")
    try:
        owners = ThreadOwners(persistence.db)
        for i in range(30):
            assert owners.claim(f"carol-{i:02d}-{uuid.uuid4().hex[:6]}", "carol")
    finally:
        persistence.close()
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/api/threads/" in r.url else None)

    _open(page, site, "/history", key="key-carol")

    bound = page.locator("#history-bound").inner_text()
    assert bound.startswith("Showing the 25 most recent of 30 threads")
    assert len(asked) == 25 and all("/carol-" in url for url in asked)
    assert not any("/carol-00-" in url or "/carol-04-" in url for url in asked)


def test_web_another_identity_cannot_reach_a_diagnosis(page: Any, site: Site) -> None:
    _open(page, site, f"/diagnoses/{site.ids['pass']}", key="key-bob")

    assert page.locator("#page-error").inner_text() == f"no diagnosis {site.ids['pass']!r}"
    assert page.locator("#claims").count() == 0
    assert "order-service" not in page.locator("main").inner_text()
    _open(page, site, "/history", key="key-bob")
    assert page.locator("#history li[data-id]").count() == 0


def test_web_cited_trace_call_graph_and_span_tree_are_drawn(page: Any, site: Site) -> None:
    # Recorded last, for bob, so the history and identity checks above see the site unchanged.
    persistence = open_persistence(site.database, origin="api")
    try:
        site.ids["traced"] = _record(
            persistence,
            "bob",
            "who calls payment-service and is it slow?",
            make_model_factory(),
            load_environment(ROOT / "tests" / "environments" / "checkout-traced.json"),
            Context(offline=True, language="en"),
        )
    finally:
        persistence.close()
    _open(page, site, f"/diagnoses/{site.ids['traced']}", key="key-bob")
    record = _record_of(site, "traced", key="key-bob")
    claims = record["self_evaluation"]["verifier_evaluation"]["executor_structured_output"][
        "claims"
    ]
    edge = next(
        b
        for claim in claims
        for b in claim["evidence_bindings"]
        if b["raw_path"].startswith("edges[")
    )

    graph = page.locator(
        f"#traces figure.callgraph[data-invocation={edge['source_invocation_id']}]"
    )
    cited = graph.locator(f"svg g.edge.cited[data-path='{edge['raw_path']}']")
    assert cited.count() == 1
    assert "checkout" in graph.locator("svg").get_attribute("aria-label")
    assert graph.locator("svg g.service").count() == 4
    assert graph.locator("svg g.edge.failing").count() >= 1  # checkout -> payment-service
    assert page.locator("#traces pre, #traces code.json").count() == 0  # drawn, not raw JSON
    tree = page.locator("#traces figure.spantree").first
    assert tree.locator("svg g.span").count() == 4
    assert "payment-service charge" in tree.locator("ol.spans").text_content()
    assert "traces 10 of 10" in page.locator("#trace-table").text_content()
    assert page.problems == []
    graph.scroll_into_view_if_needed()
    page.screenshot(path=str(site.shots / "diagnosis-traces.png"))


# --- the command line's threads, new conversations ------------------------------------------


def test_web_history_says_why_the_command_lines_diagnoses_are_not_listed(
    page: Any, site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    import apps.cli.main as cli

    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "SUPERBIZ_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    question = "Is payment-service healthy?"
    assert cli.main(["diagnose", "--offline", "--json", "--db", site.database, question]) == 0

    _open(page, site, "/history")

    note = page.locator("#history-unowned").inner_text()
    assert re.search(r"\d+ thread\(s\) in this database were started from the command line", note)
    assert "superbiz sessions list" in note
    assert question not in page.locator("#history").inner_text()
    assert page.problems == []


def test_web_ask_says_when_it_continues_a_thread_and_starts_a_new_conversation(
    page: Any, site: Site
) -> None:
    _open(page, site, "/")
    assert page.locator("#thread-note").inner_text() == "Starts a new conversation."

    page.evaluate("sessionStorage.setItem('superbiz.thread', 'thread-earlier')")
    page.reload()
    page.wait_for_selector("body[data-ready=true]")

    note = page.locator("#thread-note").inner_text()
    assert note.startswith("Continues thread thread-earlier:"), note
    page.click("#new-conversation")
    assert page.locator("#thread").input_value() == ""
    assert page.locator("#thread-note").inner_text() == "Starts a new conversation."
    assert page.evaluate("sessionStorage.getItem('superbiz.thread')") is None
    assert page.problems == []
