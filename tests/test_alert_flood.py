"""A ``superbiz serve --workers 2`` on PostgreSQL killed during a flood of Alertmanager
notifications loses nothing it accepted: after the restart every accepted notification's
investigation is finished exactly once, none failed for a reason the restart caused, none left
running (``tests/alert_flood.py`` drives it; ``bench/alert_flood.py`` measures a larger one).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.alert_flood import flood_and_crash


@pytest.mark.postgres
def test_alert_flood_killed_server_finishes_every_accepted_investigation_once(
    own_database: tuple[str, str], tmp_path: Path
) -> None:
    url, _ = own_database

    result = flood_and_crash(
        url, tmp_path, notifications=160, groups=40, seconds=8.0, kill_after_s=5.0
    )

    log = (tmp_path / "flood-server.log").read_text()[-4000:]
    assert result.accepted > 0 and result.investigations > 0, (result, log)
    assert result.at_kill["running"] + result.at_kill["queued"] > 0, (result, log)
    assert result.missing == [], (result, log)
    assert result.errors == [], (result, log)
    # A notification the server stored just before the kill but could not answer is not in
    # ``investigations``; it must still finish ``done`` exactly once, like every accepted one.
    unanswered = result.refused[0]
    for finished in (result.rows, result.records):
        assert set(finished) == {"done"}, (result, log)
        extra = finished["done"] - result.investigations
        assert 0 <= extra and (extra == 0 or unanswered > 0), (result, log)
    assert result.extra_records == 0 or unanswered > 0, (result, log)
