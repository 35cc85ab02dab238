"""Root-cause accuracy on converted Nezha faults: top-1, top-3, named anywhere, seconds.

Reads the folder ``bench/nezha_convert.py`` wrote (``<name>.env.json`` + ``<name>.case.json``
per fault) and scores the named root-cause service against each case's expected service.

Modes:
    ``--direct``  ``analysis.incident.analyze`` on each environment, with the case's windows;
                  top-1 is ``root_cause.service``, top-3 the first three suspects.
    default       the product offline (``superbiz diagnose --offline --json``, one process per
                  question, a throw-away SQLite database), once per question language
                  (``--lang zh,en``), scoring the answer's ``root_cause`` and ``suspects``;
                  each answer is also compared with ``--direct`` on the same case (the root
                  cause and the first three suspects), and every difference is printed.
    ``--model``   the same with the configured models.

It also measures the analysis on a day-sized input (``--day-scale N`` copies of one fault's data
shifted in time; off with 0): seconds and peak memory.

Targets (issue 26): top-1 >= 85 %, top-3 >= 95 % of the faults.

Usage:
    python bench/nezha_convert.py --snapshot MIRROR --faults FAULTS --out /tmp/nezha_env
    python bench/rca_nezha.py /tmp/nezha_env --direct
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from analysis.incident import IncidentInputs, IncidentReport, analyze  # noqa: E402
from evidence.environment import parse_environment  # noqa: E402

TOP1_TARGET = 0.85
TOP3_TARGET = 0.95


@dataclass
class Outcome:
    """One fault scored in one mode."""

    name: str
    expected: str
    named: list[str]
    root: str | None
    seconds: float
    verdict: str = ""
    notes: list[str] = field(default_factory=list)
    same_as_direct: bool | None = None

    @property
    def top1(self) -> bool:
        return self.root == self.expected

    @property
    def top3(self) -> bool:
        return self.expected in self.named[:3]

    @property
    def anywhere(self) -> bool:
        return self.expected in self.named or self.root == self.expected


def load_inputs(folder: Path, case: dict[str, Any]) -> IncidentInputs:
    """The analysis inputs of a case: its environment's data and its windows."""
    path = folder / case["environment"]
    raw = path.read_bytes()
    text = (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode("utf-8")
    environment = parse_environment(text, origin=str(path), base=folder)
    windows = case["windows"]
    return IncidentInputs(
        incident_start=windows["incident_start"],
        incident_end=windows["incident_end"],
        baseline_start=windows["baseline_start"],
        baseline_end=windows["baseline_end"],
        logs=list(environment.get("logs", [])),
        series=list(environment.get("series", [])),
        spans=list(environment.get("traces", [])),
        alerts=list(environment.get("alerts", [])),
        dependencies=[],
        gaps=list(case.get("gaps", [])),
    )


def run_direct(folder: Path, case: dict[str, Any], verbose: bool) -> Outcome:
    inputs = load_inputs(folder, case)
    started = time.perf_counter()
    report = analyze(inputs)
    seconds = time.perf_counter() - started
    if verbose:
        _show(report)
    root = report["root_cause"]
    return Outcome(
        name=case["name"],
        expected=case["expected_service"],
        named=[suspect["service"] for suspect in report["suspects"]],
        root=None if root is None else root["service"],
        seconds=seconds,
        notes=[report["ambiguity"]] if report["ambiguity"] else [],
    )


def _show(report: IncidentReport) -> None:
    for suspect in report["suspects"][:5]:
        print(
            f"    {suspect['score']:.3f} {suspect['service']} onset={suspect['onset']}"
            f" by={suspect['explained_by']} explains={len(suspect['explains'])}"
        )
        for signal in suspect["signals"][:4]:
            print(f"        {signal['kind']} {signal['strength']:.2f} {signal['detail'][:110]}")


def run_product(
    folder: Path, case: dict[str, Any], language: str, offline: bool, database: Path
) -> Outcome:
    """The product's answer to the case's question (``superbiz diagnose --json``), scored by its
    ``root_cause`` and ``suspects``."""
    question = case["questions"][language]
    argv = [
        sys.executable,
        "-m",
        "apps.cli.main",
        "diagnose",
        question,
        "--env",
        str(folder / case["environment"]),
        "--json",
        "--lang",
        language,
        "--db",
        str(database),
    ]
    if offline:
        argv.append("--offline")
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, check=False)
    seconds = time.perf_counter() - started
    try:
        summary = json.loads(done.stdout)
    except json.JSONDecodeError:
        return Outcome(
            case["name"],
            case["expected_service"],
            [],
            None,
            seconds,
            "error",
            [f"exit {done.returncode}: {done.stderr.strip()[-200:]}"],
        )
    root = summary.get("root_cause") or {}
    suspects = [s.get("service", "") for s in summary.get("suspects") or []]
    return Outcome(
        name=case["name"],
        expected=case["expected_service"],
        named=suspects,
        root=root.get("service") if isinstance(root, dict) else None,
        seconds=seconds,
        verdict=str(summary.get("verdict")),
    )


def _compared(product: Outcome, direct: Outcome) -> Outcome:
    """``product`` with whether it names what ``--direct`` names (root cause, top three)."""
    same = product.root == direct.root and product.named[:3] == direct.named[:3]
    product.same_as_direct = same
    if not same:
        product.notes.append(
            f"differs from --direct: root {direct.root or '-'} top-3 {direct.named[:3]}, "
            f"product root {product.root or '-'} top-3 {product.named[:3]}"
        )
    return product


def day_scale(folder: Path, case: dict[str, Any], copies: int) -> tuple[float, float, int]:
    """CPU seconds and peak RSS (MiB) of the analysis on ``copies`` shifted copies of a fault."""
    from analysis.incident import parse_time

    inputs = load_inputs(folder, case)
    base_logs, base_spans = inputs.get("logs", []), inputs.get("spans", [])
    logs, spans = [], []
    for copy in range(copies):
        shift = -copy * 240.0
        for log in base_logs:
            moment = parse_time(log["timestamp"])
            if moment is not None:
                logs.append({**log, "timestamp": _iso(moment + shift)})
        for span in base_spans:
            moment = parse_time(span["start"])
            if moment is not None:
                spans.append(
                    {
                        **span,
                        "start": _iso(moment + shift),
                        "trace_id": f"{copy:04x}{span['trace_id'][4:]}",
                        "span_id": f"{copy:04x}{span['span_id'][4:]}",
                        "parent_span_id": (
                            f"{copy:04x}{span['parent_span_id'][4:]}"
                            if span.get("parent_span_id")
                            else ""
                        ),
                    }
                )
    fields: dict[str, Any] = {
        **inputs,
        "logs": logs,
        "spans": spans,
        "baseline_start": _iso((parse_time(inputs["baseline_end"]) or 0) - 86_400),
    }
    big = cast(IncidentInputs, fields)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started, cpu = time.perf_counter(), time.process_time()
    report = analyze(big)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"  analysed {report['counts']}; gaps: {report['gaps'][-2:]}")
    print(
        f"  CPU {cpu:.1f} s (wall {seconds:.1f} s); peak RSS {rss_after / 1024:.0f} MiB"
        f" ({rss_before / 1024:.0f} MiB with the inputs built, before the analysis)"
    )
    peak = float(rss_after) * 1024
    seconds = cpu
    return seconds, peak / 2**20, len(logs) + len(spans)


def _iso(seconds: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def _report(label: str, outcomes: list[Outcome]) -> None:
    total = len(outcomes)
    if not total:
        print(f"{label}: no case")
        return
    print(f"\n== {label}")
    print(f"{'fault':50} {'expected':32} {'root cause':32} top1 top3 any  verdict   seconds")
    for o in outcomes:
        print(
            f"{o.name:50} {o.expected:32} {o.root or '-':32} {_yes(o.top1):4} {_yes(o.top3):4}"
            f" {_yes(o.anywhere):4} {o.verdict or '-':9} {o.seconds:7.2f}"
        )
    for o in outcomes:
        for note in o.notes:
            print(f"  {o.name}: {note}")
    top1 = sum(o.top1 for o in outcomes) / total
    top3 = sum(o.top3 for o in outcomes) / total
    anywhere = sum(o.anywhere for o in outcomes) / total
    seconds = sum(o.seconds for o in outcomes)
    print(
        f"total {total} faults: top-1 {top1:.1%}, top-3 {top3:.1%}, named {anywhere:.1%},"
        f" {seconds:.1f} s ({seconds / total:.2f} s a fault)"
    )
    compared = [o.same_as_direct for o in outcomes if o.same_as_direct is not None]
    if compared:
        print(f"  same root cause and top-3 as --direct: {sum(compared)} of {len(compared)}")
    verdicts: dict[str, int] = {}
    for o in outcomes:
        if o.verdict:
            verdicts[o.verdict] = verdicts.get(o.verdict, 0) + 1
    if verdicts:
        print("  verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(verdicts.items())))
    for name, value, target in (("top-1", top1, TOP1_TARGET), ("top-3", top3, TOP3_TARGET)):
        met = "TARGET MET" if value >= target else f"TARGET MISSED by {target - value:.1%}"
        print(f"  {name}: {value:.1%} (target >= {target:.0%}) {met}")


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="what bench/nezha_convert.py wrote")
    parser.add_argument("--direct", action="store_true", help="score analysis.incident only")
    parser.add_argument("--model", action="store_true", help="model mode instead of offline")
    parser.add_argument("--lang", default="zh,en", help="question languages (product modes)")
    parser.add_argument(
        "--only", help="only cases whose name contains one of these (comma-separated)"
    )
    parser.add_argument("--verbose", action="store_true", help="print the top suspects")
    parser.add_argument(
        "--day-scale",
        type=int,
        default=0,
        help="also time the analysis on N shifted copies of the first fault",
    )
    parser.add_argument("--runs", type=int, default=1, help="(accepted for uniformity)")
    parser.add_argument("--quick", action="store_true", help="the first 5 faults only")
    args = parser.parse_args(argv)
    cases = [json.loads(path.read_text()) for path in sorted(args.folder.glob("*.case.json"))]
    if args.only:
        wanted = [part for part in args.only.split(",") if part]
        cases = [case for case in cases if any(part in case["name"] for part in wanted)]
    if args.quick:
        cases = cases[:5]
    if not cases:
        print(f"no *.case.json in {args.folder}: run bench/nezha_convert.py first")
        return 0
    if args.direct:
        outcomes = []
        for case in cases:
            if args.verbose:
                print(f"{case['name']} (expected {case['expected_service']})")
            outcomes.append(run_direct(args.folder, case, args.verbose))
        _report("analysis.incident.analyze (--direct)", outcomes)
    else:
        database = Path(tempfile.mkdtemp(prefix="rca_nezha_")) / "bench.db"
        direct = {case["name"]: run_direct(args.folder, case, False) for case in cases}
        for language in args.lang.split(","):
            outcomes = [
                _compared(
                    run_product(args.folder, case, language, not args.model, database),
                    direct[case["name"]],
                )
                for case in cases
            ]
            _report(
                f"superbiz diagnose {'' if args.model else '--offline '}--json ({language})",
                outcomes,
            )
    if args.day_scale:
        seconds, peak, items = day_scale(args.folder, cases[0], args.day_scale)
        print(
            f"\nday-sized input: {items} log lines and spans ({args.day_scale} copies):"
            f" {seconds:.1f} CPU seconds, peak RSS {peak:.0f} MiB"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
