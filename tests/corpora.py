"""Where the tests find the third-party runbook corpus (never copied into this repository).

The corpus is the prometheus-operator runbook library (Apache-2.0; its LICENSE note travels with
it). It lives beside the checkout, in ``../shared/corpora/``, or wherever
``SUPERBIZ_TEST_RUNBOOK_CORPUS`` points. A test that needs it and cannot find it skips on a
developer's machine and fails in CI (``tests/components.py``).
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.components import component_unavailable

CORPUS_VARIABLE = "SUPERBIZ_TEST_RUNBOOK_CORPUS"
DEFAULT_CORPUS = (
    Path(__file__).resolve().parents[2] / "shared" / "corpora" / "prometheus-operator-runbooks"
)


def runbook_corpus() -> Path:
    """The runbook corpus folder, or skip/fail the calling test when it is not there."""
    folder = Path(os.environ.get(CORPUS_VARIABLE) or DEFAULT_CORPUS)
    if not (folder / "LICENSE").is_file():
        component_unavailable(
            "the prometheus-operator runbook corpus",
            f"{folder} has no LICENSE file; set {CORPUS_VARIABLE} to the corpus folder",
        )
    return folder
