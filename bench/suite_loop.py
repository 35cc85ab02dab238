"""The test loop: wall time of the fast unit part and of the whole suite, as a developer runs them.

- ``pytest -m "not slow"`` (the unit part: no real server, browser or program started; target:
  under 120 s);
- ``pytest`` (the whole suite, on every core through ``-n auto``; reported, with the serial
  figure the suite had before it ran in parallel for comparison).

The load average is printed before and after: other work on the machine slows both.

    .venv/bin/python bench/suite_loop.py [--quick]     # --quick: the unit part only
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

from _common import ROOT, Targets, bench_parser, machine

FAST_TARGET_S = 120.0
SERIAL_BEFORE_S = 13 * 60.0
"""The whole suite's serial wall time before it ran in parallel (12 to 14 minutes here)."""


def _run(args: list[str]) -> tuple[float, str]:
    env = dict(os.environ)
    env.setdefault(
        "SUPERBIZ_TEST_RUNBOOK_CORPUS",
        str(ROOT.parent / "shared" / "corpora" / "prometheus-operator-runbooks"),
    )
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.monotonic() - started
    tail = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
    return elapsed, re.sub(r"\s+in [0-9.]+s.*$", "", tail)


def main(argv: list[str] | None = None) -> int:
    """Times the unit part (and the whole suite unless ``--quick``); prints the targets."""
    args = bench_parser(__doc__ or "", 1, "the unit part only").parse_args(argv)
    print(f"machine: {machine()}")
    targets = Targets()
    fast_s, fast_tail = _run(["-m", "not slow"])
    print(f'pytest -m "not slow": {fast_s:.0f} s ({fast_tail})')
    targets.check(
        fast_s <= FAST_TARGET_S,
        f"unit part {fast_s:.0f} s (target <= {FAST_TARGET_S:.0f} s)",
    )
    if not args.quick:
        whole_s, whole_tail = _run([])
        print(f"pytest (whole suite, -n auto): {whole_s:.0f} s ({whole_tail})")
        print(f"whole suite vs serial before: {whole_s / SERIAL_BEFORE_S:.2f}x")
    print(f"machine after: {machine()}")
    return targets.summary()


if __name__ == "__main__":
    sys.exit(main())
