"""Alert flood with a crash: ``superbiz serve --workers 2`` on PostgreSQL SIGKILLed mid-flood.

Alertmanager notifications of many alert groups (every other one of a group adds an alert and
so starts a new investigation, the others repeat it) are sent from 8 clients, spread evenly
over the flood; part-way the whole server is killed with SIGKILL, started again on the same
database, and left to finish what it had accepted (``tests/alert_flood.py`` drives it; the
diagnoses are the offline rules). Printed: notifications accepted per second before the kill,
the investigations accepted and finished, and those lost (not finished ``done`` exactly once,
or finished ``failed``). Target: lost 0, failed 0.

    .venv/bin/python bench/alert_flood.py [--quick]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from _common import ROOT, Targets, bench_parser, fmt, machine, table, throwaway_postgres
from psycopg.conninfo import conninfo_to_dict

sys.path.insert(0, str(ROOT))

from tests.alert_flood import flood_and_crash  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """Run the flood (``--quick``: a smaller one) and print the figures."""
    parser = bench_parser(__doc__ or "", 1, "120 notifications over 6 s instead of 400 over 16 s")
    args = parser.parse_args(argv)
    size = (120, 30, 6.0, 4.0) if args.quick else (400, 80, 16.0, 10.0)
    notifications, groups, seconds, kill_after = size
    print(f"alert flood with a crash; {machine()}")
    print(
        f"{notifications} notifications of {groups} groups over {seconds:.0f} s, 8 clients, "
        f"SIGKILL after {kill_after:.0f} s, restart on the same database"
    )
    targets = Targets()
    for run in range(max(args.runs, 1)):
        with throwaway_postgres() as conninfo, tempfile.TemporaryDirectory() as tmp:
            parts = conninfo_to_dict(conninfo)
            url = (
                f"postgresql://{parts.get('user', 'postgres')}@{parts.get('host', '127.0.0.1')}:"
                f"{parts.get('port', 5432)}/{parts['dbname']}"
            )
            result = flood_and_crash(
                url,
                Path(tmp),
                notifications=notifications,
                groups=groups,
                seconds=seconds,
                kill_after_s=kill_after,
            )
        failed = result.rows["failed"]
        lost = len(result.missing) + result.extra_records
        print()
        print(
            table(
                ["run", "figure", "value"],
                [
                    [run + 1, "notifications sent before the kill", result.sent],
                    [run + 1, "accepted (2xx)", result.accepted],
                    [run + 1, "accepted per second", fmt(result.accepted_per_s, 1)],
                    [run + 1, "unanswered while killed", result.refused[0]],
                    [run + 1, "investigations accepted", result.investigations],
                    [
                        run + 1,
                        "running / queued at the kill",
                        f"{result.at_kill['running']} / {result.at_kill['queued']}",
                    ],
                    [run + 1, "finished done, exactly once", result.finished],
                    [run + 1, "failed", failed],
                    [run + 1, "lost", lost],
                    [run + 1, "recovery after the restart (s)", fmt(result.recovery_s, 1)],
                ],
            )
        )
        for error in result.errors[:5]:
            print(f"  {error}")
        targets.check(
            lost == 0 and failed == 0,
            f"run {run + 1}: lost {lost}, failed {failed} of {result.investigations} "
            "accepted investigations (target 0)",
        )
    return targets.summary()


if __name__ == "__main__":
    raise SystemExit(main())
