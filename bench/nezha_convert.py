"""Convert Nezha faults into environment files the product reads (logs, series, traces).

Nezha (IntelligentDDS/Nezha, FSE 2023, MIT licence) records a TrainTicket deployment with
injected faults: per-minute log and trace CSVs, per-pod metric CSVs. Given a snapshot of the
repository (a checked-out folder, or a bare git mirror read with ``git show``) and a file listing
faults in the dataset's own format (one JSON object a line: ``day``, ``inject_time``,
``inject_pod``, ``inject_type``), this writes per fault:

- ``<name>.env.json``, an environment file (README, "Environment files"): ``now`` (the end of the
  data), ``logs`` (every level), ``series`` (per pod: CPU, memory, server and client latency,
  workload, success rate, network bytes; one point a minute) and ``traces`` (OTLP JSON);
- ``<name>.case.json``: the windows to compare, the questions (Chinese and English), and the
  expected service.

Only observability data is read: the minute files of the injection minute and the two after it
(a file named ``HH_MM`` holds the minute before ``HH:MM``), the pod metric rows of the
``--baseline-minutes`` before the injection, and the fault-free capture of the same day under
``construct_data/`` as the log and trace baseline. The label's pod only names the output files and
the expected answer; its ``inject_timestamp`` is not used (8 hours off the data), ``inject_time``
is read as UTC.

Usage:
    python bench/nezha_convert.py --snapshot /path/to/Nezha --faults faults.jsonl --out DIR
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from evidence.otlp import to_otlp  # noqa: E402
from state.records import LogEntry, SeriesEntry, SpanEntry  # noqa: E402

csv.field_size_limit(1 << 24)

INCIDENT_FILES = 3
"""Minute files read per fault: the injection minute's and the two after."""
BASELINE_MINUTES = 20
"""Pod metric minutes before the injection used as the series baseline."""

METRICS = {
    "CpuUsageRate(%)": ("cpu_usage_percent", "%"),
    "MemoryUsageRate(%)": ("memory_usage_percent", "%"),
    "PodServerLatencyP90(s)": ("server_latency_p90_seconds", "s"),
    "PodServerLatencyP99(s)": ("server_latency_p99_seconds", "s"),
    "PodClientLatencyP90(s)": ("client_latency_p90_seconds", "s"),
    "PodWorkload(Ops)": ("workload_ops", "ops"),
    "PodSuccessRate(%)": ("success_rate_percent", "%"),
    "NetworkReceiveBytes": ("network_receive_bytes", "B"),
    "NetworkTransmitBytes": ("network_transmit_bytes", "B"),
}
_LOG_PREFIX = re.compile(r"^\s*(\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?)\s+([A-Za-z]+)\s+")
_LEVELS = {"TRACE", "DEBUG", "INFO", "WARN", "WARNING", "ERROR", "FATAL", "CRITICAL"}
_POD_HASHES = re.compile(r"-[0-9a-z]{5,10}-[0-9a-z]{5}$")


def service_of(pod: str) -> str:
    """A pod's service: its name without the two trailing hash parts."""
    return _POD_HASHES.sub("", pod)


class Snapshot:
    """Files of the Nezha repository, from a folder or a bare git mirror (``HEAD``)."""

    def __init__(self, location: Path) -> None:
        self.location = location
        self.bare = not (location / "rca_data").is_dir()

    def read(self, path: str) -> str | None:
        if not self.bare:
            file = self.location / path
            return file.read_text(encoding="utf-8", errors="replace") if file.is_file() else None
        done = subprocess.run(
            ["git", "-C", str(self.location), "show", f"HEAD:{path}"],
            capture_output=True,
            check=False,
        )
        return done.stdout.decode("utf-8", errors="replace") if done.returncode == 0 else None

    def names(self, folder: str) -> list[str]:
        if not self.bare:
            base = self.location / folder
            return sorted(item.name for item in base.iterdir()) if base.is_dir() else []
        done = subprocess.run(
            ["git", "-C", str(self.location), "ls-tree", "--name-only", f"HEAD:{folder}"],
            capture_output=True,
            check=False,
            text=True,
        )
        return sorted(done.stdout.split()) if done.returncode == 0 else []


def _rows(text: str | None) -> Iterator[dict[str, str]]:
    if text:
        yield from csv.DictReader(io.StringIO(text))


def _iso_nanos(nanos: int) -> str:
    moment = datetime.fromtimestamp(nanos // 1_000_000_000, UTC)
    micros = (nanos % 1_000_000_000) // 1000
    return moment.replace(microsecond=micros).isoformat().replace("+00:00", "Z")


def _row_nanos(row: dict[str, str]) -> int | None:
    raw = (row.get("TimeUnixNano") or "").strip()
    if raw.isdigit():
        return int(raw)
    stamp = (row.get("Timestamp") or "").strip()
    if not stamp:
        return None
    stamp = re.sub(r"(\.\d{6})\d+", r"\1", stamp.replace("Z", ""))
    try:
        moment = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1_000_000_000)


def log_entry(row: dict[str, str]) -> LogEntry | None:
    """One CSV log row as a log entry: level and message read from the container's line."""
    nanos = _row_nanos(row)
    pod = row.get("PodName", "")
    if nanos is None or not pod:
        return None
    raw = row.get("Log", "")
    try:
        decoded = json.loads(raw)
        line = str(decoded.get("log", raw)) if isinstance(decoded, dict) else raw
    except json.JSONDecodeError:
        line = raw
    line = line.rstrip("\n")
    level = "INFO"
    match = _LOG_PREFIX.match(line)
    if match and match.group(2).upper() in _LEVELS:
        level = match.group(2).upper()
        line = line[match.end() :]
    else:
        word = re.search(r"\b(ERROR|WARN(?:ING)?|FATAL|DEBUG)\b", line[:80])
        if word:
            level = word.group(1)
    return LogEntry(
        timestamp=_iso_nanos(nanos),
        level="WARN" if level == "WARNING" else level,
        service=service_of(pod),
        instance=pod,
        message=line.strip(),
    )


def span_entry(row: dict[str, str]) -> SpanEntry | None:
    """One CSV trace row as a span (Nezha records no span status or kind)."""
    try:
        start = int(row["StartTimeUnixNano"])
        end = int(row["EndTimeUnixNano"])
    except (KeyError, ValueError):
        return None
    pod = row.get("PodName", "")
    parent = row.get("ParentID", "")
    span = SpanEntry(
        trace_id=row.get("TraceID", "").lower(),
        span_id=row.get("SpanID", "").lower(),
        service=service_of(pod),
        operation=row.get("OperationName", ""),
        kind="unspecified",
        start=_iso_nanos(start),
        duration_ms=round((end - start) / 1_000_000, 3),
        status="unset",
        attributes={"k8s.pod.name": pod},
    )
    if parent and parent != "root":
        span["parent_span_id"] = parent.lower()
    return span


@dataclass(frozen=True)
class Fault:
    """One fault of the list, in the dataset's format."""

    day: str
    inject_time: datetime
    pod: str
    kind: str

    @property
    def name(self) -> str:
        return f"{self.day}_{self.inject_time:%H-%M}_{service_of(self.pod)}"

    @classmethod
    def read(cls, line: str) -> Fault:
        data = json.loads(line)
        moment = datetime.fromisoformat(data["inject_time"]).replace(tzinfo=UTC)
        return cls(data["day"], moment, data["inject_pod"], data.get("inject_type", ""))


def minute_files(fault: Fault, kind: str) -> list[str]:
    """The minute files of a fault: the injection minute's and the two after (``log``/``trace``)."""
    first = fault.inject_time.replace(second=0, microsecond=0)
    names = []
    for step in range(INCIDENT_FILES):
        moment = first + timedelta(minutes=step)
        names.append(f"rca_data/{fault.day}/{kind}/{moment:%H_%M}_{kind}.csv")
    return names


def _kept(trace_id: str, sample: int) -> bool:
    """Whether a trace is kept when one in ``sample`` is (by its id: deterministic)."""
    if sample <= 1:
        return True
    try:
        return int(trace_id[-6:], 16) % sample == 0
    except ValueError:
        return False


class Converter:
    """Builds environments from a snapshot, caching the per-day metric files.

    ``sample`` > 1 keeps one trace in that many (by trace id), with the INFO log lines of the
    kept traces and every other log line; ``metrics`` limits the series written (small
    fixtures for tests).
    """

    def __init__(
        self,
        snapshot: Snapshot,
        baseline_minutes: int = BASELINE_MINUTES,
        sample: int = 1,
        metrics: tuple[str, ...] = (),
    ) -> None:
        self.snapshot = snapshot
        self.baseline_minutes = baseline_minutes
        self.sample = sample
        self.metrics = metrics
        self._metrics: dict[str, list[dict[str, str]]] = {}

    def _construct(self, day: str, kind: str) -> list[str]:
        folder = f"construct_data/{day}/{kind}"
        return [f"{folder}/{name}" for name in self.snapshot.names(folder) if name.endswith(".csv")]

    def _metric_rows(self, day: str) -> list[dict[str, str]]:
        if day not in self._metrics:
            rows: list[dict[str, str]] = []
            folder = f"rca_data/{day}/metric"
            for name in self.snapshot.names(folder):
                if name.endswith("_metric.csv"):
                    rows.extend(_rows(self.snapshot.read(f"{folder}/{name}")))
            self._metrics[day] = rows
        return self._metrics[day]

    def series(self, fault: Fault, end: float) -> list[SeriesEntry]:
        start = fault.inject_time.timestamp() - self.baseline_minutes * 60
        points: dict[tuple[str, str], list[list[float]]] = {}
        for row in self._metric_rows(fault.day):
            try:
                moment = float(row["TimeStamp"])
            except (KeyError, ValueError):
                continue
            if not start <= moment <= end:
                continue
            pod = row.get("PodName", "")
            for column, (metric, _) in METRICS.items():
                if self.metrics and metric not in self.metrics:
                    continue
                try:
                    value = float(row.get(column, ""))
                except ValueError:
                    continue
                if value == value:  # not NaN
                    points.setdefault((pod, metric), []).append([moment, value])
        entries: list[SeriesEntry] = []
        units = dict(METRICS.values())
        for (pod, metric), values in sorted(points.items()):
            values.sort()
            numbers = [value for _, value in values]
            entries.append(
                SeriesEntry(
                    metric=metric,
                    labels={"service": service_of(pod), "pod": pod},
                    points_count=len(values),
                    min=min(numbers),
                    max=max(numbers),
                    last=numbers[-1],
                    unit=units[metric],
                    points=values,
                )
            )
        return entries

    def convert(self, fault: Fault) -> tuple[dict[str, Any], dict[str, Any]]:
        """The environment and the case of one fault."""
        logs: list[LogEntry] = []
        spans: list[SpanEntry] = []
        baseline_logs = self._construct(fault.day, "log")
        baseline_traces = self._construct(fault.day, "trace")
        for path in [*baseline_logs, *minute_files(fault, "log")]:
            for row in _rows(self.snapshot.read(path)):
                entry = log_entry(row)
                if entry is None:
                    continue
                if entry["level"] == "INFO" and not _kept(row.get("TraceID", ""), self.sample):
                    continue
                logs.append(entry)
        for path in [*baseline_traces, *minute_files(fault, "trace")]:
            for row in _rows(self.snapshot.read(path)):
                span = span_entry(row)
                if span is not None and _kept(span["trace_id"], self.sample):
                    spans.append(span)
        logs.sort(key=lambda entry: (entry["timestamp"], entry["service"], entry["message"]))
        spans.sort(key=lambda entry: (entry["start"], entry["span_id"]))
        newest = max(
            [entry["timestamp"] for entry in logs] + [entry["start"] for entry in spans],
            default=fault.inject_time.isoformat(),
        )
        end = datetime.fromisoformat(newest.replace("Z", "+00:00"))
        series = self.series(fault, end.timestamp())
        oldest = min(
            [entry["timestamp"] for entry in logs[:1]]
            + [entry["start"] for entry in spans[:1]]
            + [_iso_nanos(int(s["points"][0][0]) * 1_000_000_000) for s in series if s["points"]],
        )
        inject = fault.inject_time.isoformat().replace("+00:00", "Z")
        now = end.replace(microsecond=0) + timedelta(seconds=1)
        environment: dict[str, Any] = {
            "now": now.isoformat().replace("+00:00", "Z"),
            "logs": logs,
            "series": series,
            "traces": to_otlp(spans),
        }
        when = f"{fault.inject_time:%Y-%m-%d %H:%M:%S} UTC"
        case = {
            "name": fault.name,
            "environment": f"{fault.name}.env.json",
            "expected_service": service_of(fault.pod),
            "fault_type": fault.kind,
            "windows": {
                "baseline_start": oldest,
                "baseline_end": inject,
                "incident_start": inject,
                "incident_end": environment["now"],
            },
            "questions": {
                "zh": f"{when} 起系统出现异常，哪个服务是根因？",
                "en": f"Something went wrong from {when}: which service is the root cause?",
            },
            "gaps": [
                "logs and traces: the baseline is a fault-free capture of the same day "
                f"({', '.join(Path(p).name for p in baseline_logs + baseline_traces) or 'none'})",
            ],
            "counts": {"logs": len(logs), "spans": len(spans), "series": len(series)},
        }
        return environment, case


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--snapshot", type=Path, required=True, help="Nezha folder or bare mirror")
    parser.add_argument("--faults", type=Path, required=True, help="faults, one JSON a line")
    parser.add_argument("--out", type=Path, required=True, help="folder for the files")
    parser.add_argument("--baseline-minutes", type=int, default=BASELINE_MINUTES)
    parser.add_argument("--only", help="convert only faults whose name contains this")
    parser.add_argument("--sample", type=int, default=1, help="keep one trace in N (fixtures)")
    parser.add_argument("--metrics", default="", help="comma-separated series to keep (fixtures)")
    args = parser.parse_args(argv)
    snapshot = Snapshot(args.snapshot)
    metrics = tuple(name for name in args.metrics.split(",") if name)
    converter = Converter(snapshot, args.baseline_minutes, args.sample, metrics)
    args.out.mkdir(parents=True, exist_ok=True)
    lines = [line for line in args.faults.read_text().splitlines() if line.strip()]
    for line in lines:
        fault = Fault.read(line)
        if args.only and args.only not in fault.name:
            continue
        environment, case = converter.convert(fault)
        (args.out / f"{fault.name}.env.json").write_text(
            json.dumps(environment, ensure_ascii=False, separators=(",", ":"))
        )
        (args.out / f"{fault.name}.case.json").write_text(
            json.dumps(case, ensure_ascii=False, indent=1)
        )
        print(f"{fault.name}: {case['counts']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
