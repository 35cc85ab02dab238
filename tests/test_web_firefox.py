"""The web pages in Firefox: Debian's ``firefox-esr``, headless, driven through Marionette.

Playwright drives only its own patched Firefox build, which cannot be downloaded here, so these
tests talk to the stock browser over its own remote protocol. They check what differs between
engines: the page runs (key from the fragment, data fetched and drawn as text and SVG), charts
are drawn, the history lists the caller's diagnoses, and another identity sees nothing.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from marionette_driver.marionette import Marionette  # type: ignore[import-untyped]

from tests.components import component_unavailable
from tests.prometheus_kit import free_port
from tests.test_web import Site, site  # noqa: F401  (the same diagnoses and server)

FIREFOX = "/usr/bin/firefox-esr"


@pytest.fixture(scope="module")
def firefox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if shutil.which(FIREFOX) is None:
        component_unavailable("Firefox", f"{FIREFOX} is missing; apt-get install firefox-esr")
    profile = tmp_path_factory.mktemp("firefox-profile")
    port = free_port()
    (profile / "user.js").write_text(
        f'user_pref("marionette.port", {port});\n'
        'user_pref("browser.shell.checkDefaultBrowser", false);\n'
        'user_pref("datareporting.policy.dataSubmissionEnabled", false);\n'
        'user_pref("app.update.disabledForTesting", true);\n'
    )
    process = subprocess.Popen(
        [FIREFOX, "--headless", "--marionette", "--no-remote", "--profile", str(profile)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        client = Marionette(host="127.0.0.1", port=port, startup_timeout=60)
        deadline = time.monotonic() + 60
        while True:
            try:
                client.start_session()
                break
            except Exception:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise
                time.sleep(0.5)
        yield client
        client.delete_session()
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()


def _until(check: Callable[[], Any], what: str, timeout_s: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"Firefox never showed {what}")


def _open(firefox: Any, url: str) -> None:
    firefox.navigate("about:blank")  # a new page load: the fragment's key is read afresh
    firefox.navigate(url)


def test_firefox_diagnosis_page_takes_the_key_from_the_fragment_and_shows_the_claims(
    firefox: Any,
    site: Site,  # noqa: F811
) -> None:
    _open(firefox, f"{site.url}/diagnoses/{site.ids['pass']}#key=key-alice")

    text = _until(
        lambda: (
            (t := firefox.execute_script("return document.body.innerText"))
            and "Why this verdict" in t
            and t
        ),
        "the diagnosis page",
    )
    assert "#key" not in firefox.get_url() and "key-alice" not in firefox.get_url()
    assert "PASS" in text and "confirmed" in text
    marks = firefox.execute_script("return document.querySelectorAll('mark').length")
    assert marks >= 1  # the cited excerpt is highlighted inside its ref


def test_firefox_draws_the_chart_of_a_cited_series(firefox: Any, site: Site) -> None:  # noqa: F811
    _open(firefox, f"{site.url}/diagnoses/{site.ids['sample']}#key=key-alice")

    labels = _until(
        lambda: firefox.execute_script(
            "return [...document.querySelectorAll('figure.chart svg text.chart-max')]"
            ".map(e => e.textContent)"
        ),
        "a chart",
    )
    assert all(label.startswith("max ") for label in labels)


def test_firefox_history_and_another_identity(firefox: Any, site: Site) -> None:  # noqa: F811
    _open(firefox, f"{site.url}/history#key=key-alice")
    listed = _until(
        lambda: firefox.execute_script(
            "return [...document.querySelectorAll('#history li[data-id]')].map(e => e.dataset.id)"
        ),
        "the history",
    )
    assert set(site.ids.values()) <= set(listed)

    _open(firefox, f"{site.url}/diagnoses/{site.ids['pass']}#key=key-bob")
    text = _until(
        lambda: (
            (t := firefox.execute_script("return document.body.innerText"))
            and ("not found" in t.lower() or "no diagnosis" in t.lower())
            and t
        ),
        "the refusal for another identity",
    )
    assert "Why this verdict" not in text
