"""query_logs over local files: formats, multi-line entries, rotation, windows, bounded memory.

The PostgreSQL test reads the machine's own PostgreSQL server log after provoking a known error
in it (a connection to a database that does not exist).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import tracemalloc
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from evidence.composed import ComposedBackend, RealClock, Unavailable, configured_backend
from evidence.config import ConfigError, load_settings
from evidence.logfiles import FileLogs
from evidence.logformats import local_zone, parse_line
from evidence.logquery import iso
from persistence.ledger import InMemoryLedger
from tests.backend_kit import call_tool, evidence_refs, run_doctor
from tests.postgres_log_kit import (
    log_sizes,
    postgres_log_glob,
    provoke_postgres_fatal,
    wait_for_line,
)
from tools.backend import BackendError
from tools.runner import ToolRunner

NOW = datetime(2026, 3, 1, 10, 30, tzinfo=UTC)


def _at(minutes_ago: float) -> datetime:
    return NOW - timedelta(minutes=minutes_ago)


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _pg(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d} UTC"


def _logs(backend: FileLogs, **query: object) -> dict[str, object]:
    return dict(backend.query_logs(**query))  # type: ignore[arg-type]


def _messages(output: Mapping[str, object]) -> list[str]:
    return [str(e["message"]) for e in output["logs"]]  # type: ignore[attr-defined]


# --- line formats ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "at", "level", "message", "instance"),
    [
        (
            '2026-03-01 10:29:00.123 UTC [4711] app@orders FATAL:  database "orders" does not '
            "exist",
            "2026-03-01T10:29:00.123000+00:00",
            "FATAL",
            'database "orders" does not exist',
            None,
        ),
        (
            '{"@timestamp": "2026-03-01T10:29:00Z", "log.level": "error", "message": "boom", '
            '"host": {"name": "api-1"}}',
            "2026-03-01T10:29:00+00:00",
            "error",
            "boom",
            "api-1",
        ),
        (
            '{"ts": 1772360940000, "lvl": "WARN", "msg": "slow", "pod": "api-7"}',
            "2026-03-01T10:29:00+00:00",
            "WARN",
            "slow",
            "api-7",
        ),
        (
            'time=2026-03-01T10:29:00+08:00 level=error msg="pool exhausted: 30 s" host=db-2',
            "2026-03-01T10:29:00+08:00",
            "error",
            "pool exhausted: 30 s",
            "db-2",
        ),
        (
            "2026-03-01T10:29:00.5Z [main] ERROR com.shop.Checkout - card declined",
            "2026-03-01T10:29:00.500000+00:00",
            "ERROR",
            "com.shop.Checkout - card declined",
            None,
        ),
        (
            "2026/03/01 10:29:00 [error] 31#31: *9 upstream timed out",
            None,  # nginx writes local time: checked below
            "error",
            "31#31: *9 upstream timed out",
            None,
        ),
        (
            "Mar  1 10:29:00 web-3 sshd[812]: error: maximum authentication attempts exceeded",
            None,  # syslog writes local time without a year
            "error",
            "maximum authentication attempts exceeded",
            "web-3",
        ),
    ],
    ids=["postgres", "json-ecs", "json-epoch-ms", "logfmt", "iso-text", "nginx", "syslog"],
)
def test_logformats_lines_give_time_level_message_and_instance(
    line: str, at: str | None, level: str, message: str, instance: str | None
) -> None:
    parsed = parse_line(line, now=NOW, local=local_zone())
    assert parsed.at is not None
    if at is not None:
        assert parsed.at.isoformat() == at
    else:
        assert parsed.at.replace(tzinfo=None) == datetime(2026, 3, 1, 10, 29)
        assert parsed.at.utcoffset() == local_zone().utcoffset(parsed.at.replace(tzinfo=None))
    assert (parsed.level, parsed.message, parsed.instance) == (level, message, instance)


@pytest.mark.parametrize(
    "line",
    [
        "2026-03-01 10:29:00.123 UTC [4711] app@orders STATEMENT:  SELECT 1",
        '  File "/srv/app.py", line 12, in handle',
        "java.lang.IllegalStateException: pool closed",
    ],
    ids=["postgres-statement", "traceback-frame", "exception-line"],
)
def test_logformats_follow_up_lines_continue_the_entry_before(line: str) -> None:
    assert parse_line(line, now=NOW, local=local_zone()).at is None


def test_logformats_a_level_word_deep_in_a_message_is_no_level() -> None:
    line = "2026-03-01T10:29:00Z cache rebuilt after the upstream error: 3 keys lost"
    parsed = parse_line(line, now=NOW, local=local_zone())
    assert (parsed.level, parsed.message) == (None, line.split("Z ", 1)[1])
    worker = parse_line("2026-03-01T10:29:00Z worker log: rotated", now=NOW, local=local_zone())
    assert (worker.level, worker.message) == (None, "worker log: rotated")


# --- one folder of files ---------------------------------------------------------------------


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "logs"
    folder.mkdir()
    current = [
        f"{_pg(_at(50))} [10] app@shop LOG:  checkpoint starting",
        f'{_pg(_at(40))} [11] app@shop ERROR:  relation "carts" does not exist',
        f"{_pg(_at(40))} [11] app@shop STATEMENT:  SELECT * FROM carts",
        f"{_iso(_at(30))} ERROR Traceback (most recent call last):",
        '  File "/srv/checkout.py", line 41, in pay',
        "ValueError: card declined",
        f'{_pg(_at(20))} [12] app@shop FATAL:  database "ghost" does not exist',
        f"{_pg(_at(10))} [13] app@shop WARNING:  disk nearly full",
        f"{_pg(_at(2))} [14] app@shop err:  lowercase alias of error",
    ]
    (folder / "db.log").write_text("\n".join(current) + "\n")
    rotated = [f"{_pg(_at(70 + i))} [9] app@shop ERROR:  old rotated error {i}" for i in range(3)]
    (folder / "db.log.1").write_text("\n".join(reversed(rotated)) + "\n")
    with gzip.open(folder / "db.log.2.gz", "wt") as handle:
        handle.write(f"{_pg(_at(100))} [8] app@shop ERROR:  compressed error\n")
        handle.write(f"{_pg(_at(100))} [8] app@shop DETAIL:  Key (id)=(7) already exists.\n")
        handle.write(f"{_pg(_at(99))} [8] app@shop LOG:  compressed log line\n")
    for name, minutes in (("db.log", 2), ("db.log.1", 70), ("db.log.2.gz", 99)):
        stamp = _at(minutes).timestamp()
        os.utime(folder / name, (stamp, stamp))
    return folder


def _files(folder: Path) -> FileLogs:
    return FileLogs([("shop-db", str(folder / "db.log*"))], now=lambda: NOW)


def test_logfiles_default_window_is_the_last_hour_newest_first(log_dir: Path) -> None:
    output = _logs(_files(log_dir), service="shop-db")

    assert [e["timestamp"] for e in output["logs"]] == [  # type: ignore[attr-defined]
        iso(_at(minutes)) for minutes in (2, 10, 20, 30, 40, 50)
    ]
    assert (output["total"], output["truncated"]) == (6, False)
    assert (output["window_start"], output["window_end"]) == (
        "2026-03-01T09:30:00Z",
        "2026-03-01T10:30:00Z",
    )
    assert all("instance" not in e for e in output["logs"])  # type: ignore[attr-defined]
    assert {e["service"] for e in output["logs"]} == {"shop-db"}  # type: ignore[attr-defined]


def test_logfiles_multi_line_entries_stay_with_their_first_line(log_dir: Path) -> None:
    output = _logs(_files(log_dir), service="shop-db", level="ERROR")

    assert _messages(output) == [
        "lowercase alias of error",
        'Traceback (most recent call last): | File "/srv/checkout.py", line 41, in pay | '
        "ValueError: card declined",
        'relation "carts" does not exist | STATEMENT: SELECT * FROM carts',
    ]
    assert output["total"] == 3


def test_logfiles_rotated_and_gzip_files_are_searched_when_the_window_reaches_them(
    log_dir: Path,
) -> None:
    start = _iso(_at(120))
    output = _logs(_files(log_dir), service="shop-db", level="error", start=start)

    messages = _messages(output)
    assert messages[-4:] == [
        "old rotated error 0",
        "old rotated error 1",
        "old rotated error 2",
        "compressed error | DETAIL: Key (id)=(7) already exists.",
    ]
    assert output["total"] == 7


def test_logfiles_files_written_before_the_window_are_never_opened(log_dir: Path) -> None:
    broken = log_dir / "db.log.3.gz"
    broken.write_bytes(b"not gzip at all")
    stamp = _at(600).timestamp()
    os.utime(broken, (stamp, stamp))

    assert _logs(_files(log_dir), service="shop-db")["total"] == 6  # the last hour: never opened
    reached = _logs(_files(log_dir), service="shop-db", start=_iso(_at(700)))
    assert len(_messages(reached)) == 11  # the readable files, rotated ones too, still answer
    unread = reached["unread"]
    assert isinstance(unread, list) and len(unread) == 1
    assert re.fullmatch(r".*/db\.log\.3\.gz \(Not a gzipped file.*\)", unread[0])


def test_logfiles_text_filter_limit_and_truncation(log_dir: Path) -> None:
    backend = _files(log_dir)
    found = _logs(backend, service="shop-db", query="DOES NOT EXIST")
    limited = _logs(backend, service="shop-db", limit=2)

    assert _messages(found) == [
        'database "ghost" does not exist',
        'relation "carts" does not exist | STATEMENT: SELECT * FROM carts',
    ]
    assert (limited["total"], limited["truncated"], len(limited["logs"])) == (6, True, 2)  # type: ignore[arg-type]


def test_logfiles_unknown_service_and_unmatched_glob_are_errors(tmp_path: Path) -> None:
    backend = FileLogs([("api", str(tmp_path / "missing" / "*.jsonl"))], now=lambda: NOW)
    with pytest.raises(BackendError, match=r"no log files are configured for service 'web'"):
        backend.query_logs(service="web")
    with pytest.raises(BackendError, match=r"no file matches .*missing/\*\.jsonl \(service api\)"):
        backend.query_logs(service="api")
    report = backend.check()
    assert report["status"] == "error"
    assert report.get("setting") == "SUPERBIZ_LOG_FILES"


# --- bounded -------------------------------------------------------------------------------


def test_logfiles_a_10_mb_line_costs_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "huge.log"
    with path.open("w") as handle:
        handle.write(f"{_iso(_at(5))} ERROR first\n")
        handle.write(f"{_iso(_at(4))} ERROR " + "x" * (10 * 1024 * 1024) + "\n")
        handle.write(f"{_iso(_at(3))} ERROR last\n")
    backend = FileLogs([("huge", str(path))], now=lambda: NOW)

    tracemalloc.start()
    try:
        output = _logs(backend, service="huge")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert _messages(output)[0] == "last" and _messages(output)[2] == "first"
    assert len(_messages(output)[1]) == 4000 and _messages(output)[1].endswith("…")
    assert peak < 2 * 1024 * 1024, f"peak {peak} bytes for a 10 MB line"


def test_logfiles_a_10_gb_file_costs_what_the_window_costs(tmp_path: Path) -> None:
    path = tmp_path / "big.log"
    with path.open("wb") as handle:
        handle.seek(10 * 1024**3)  # a 10 GB hole (sparse) before the last lines
        handle.write(f"{_iso(_at(600))} ERROR from yesterday\n".encode())
        for minute in range(30, 0, -1):
            handle.write(f"{_iso(_at(minute))} ERROR recent {minute}\n".encode())
    assert path.stat().st_size > 10 * 1024**3
    backend = FileLogs([("big", str(path))], now=lambda: NOW)

    tracemalloc.start()
    try:
        output = _logs(backend, service="big", limit=5)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert _messages(output) == [f"recent {m}" for m in range(1, 6)]
    assert output["total"] == 30
    assert peak < 1024 * 1024, f"peak {peak} bytes"


def test_logfiles_scan_budget_makes_the_total_a_lower_bound(tmp_path: Path) -> None:
    path = tmp_path / "many.log"
    path.write_text("".join(f"{_iso(_at(50 - i / 100))} ERROR line {i}\n" for i in range(5000)))
    backend = FileLogs([("many", str(path))], now=lambda: NOW, max_scan_bytes=64 * 1024)
    logs_only = ComposedBackend(
        logs=backend,
        metrics=Unavailable("metrics", "-"),
        knowledge=Unavailable("runbook", "-"),
        clock=RealClock(),
    )
    row = call_tool(
        ToolRunner(logs_only, InMemoryLedger()), "query_logs", {"service": "many"}, "b1"
    )
    output = row["output"] or {}

    assert output.get("total_at_least") is True
    summary = row["retrieval_details"]["evidence_refs"][-1]["text"]
    assert re.fullmatch(
        r"query_logs service=many window=2026-03-01T09:30:00Z/2026-03-01T10:30:00Z "
        r"matched 20 of at least \d+ \(truncated\)",
        summary,
    ), summary


# --- configuration, runner, doctor -----------------------------------------------------------


def test_logfiles_configured_by_variable_serve_query_logs_with_refs(
    log_dir: Path, tmp_path: Path
) -> None:
    settings = load_settings({"SUPERBIZ_LOG_FILES": f"shop-db={log_dir}/db.log*"}, cwd=tmp_path)
    backend = configured_backend(settings)
    assert backend.services() == ["shop-db"]
    runner = ToolRunner(backend, InMemoryLedger())
    row = call_tool(runner, "query_logs", {"service": "shop-db", "level": "FATAL"}, "f1")
    # the real clock: the fixture's lines are from 2026-03-01, far outside the last hour
    assert row["status"] == "no_hit", row["error"]
    summary = row["retrieval_details"]["evidence_refs"][-1]["text"]
    assert re.fullmatch(
        r"query_logs level=FATAL service=shop-db window=\S+/\S+ matched 0 of 0 \(complete\)",
        summary,
    )


def test_logfiles_config_errors_name_the_setting(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"SUPERBIZ_LOG_FILES: '/var/log/x.log' is not service=glob"
    ):
        load_settings({"SUPERBIZ_LOG_FILES": "/var/log/x.log"}, cwd=tmp_path)
    with pytest.raises(
        ConfigError,
        match=r"SUPERBIZ_LOKI_URL and SUPERBIZ_LOG_FILES are both set: at most one log source",
    ):
        load_settings(
            {"SUPERBIZ_LOG_FILES": "a=/x/*.log", "SUPERBIZ_LOKI_URL": "http://127.0.0.1:3100"},
            cwd=tmp_path,
        )
    (tmp_path / "superbiz.toml").write_text(
        '[opensearch]\nurl = "http://127.0.0.1:9200"\n[loki]\nurl = "http://127.0.0.1:3100"\n'
    )
    with pytest.raises(
        ConfigError, match=r"loki\.url in .* and opensearch\.url in .* are both set"
    ):
        load_settings({}, cwd=tmp_path)


def test_doctor_reports_the_log_files(log_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = f"shop-db={log_dir}/db.log*;api={log_dir}/none/*.jsonl"
    code, out, err = run_doctor(monkeypatch, {"SUPERBIZ_LOG_FILES": files})
    assert code == 1
    line = out.splitlines()[0]
    assert re.match(
        r"log_files +FAIL +api: no file matches \S+none/\*\.jsonl; shop-db: 3 files, ", line
    ), line
    assert "check SUPERBIZ_LOG_FILES" in err

    files = f"shop-db={log_dir}/db.log*"
    code, out, _ = run_doctor(monkeypatch, {"SUPERBIZ_LOG_FILES": files}, as_json=True)
    assert code == 0
    report = json.loads(out)["backends"][0]
    assert (report["backend"], report["status"]) == ("log_files", "ok")
    assert re.fullmatch(
        r"shop-db: 3 files, \d+ B, last written 2026-03-01T10:28:00Z", report["detail"]
    )


# --- the machine's PostgreSQL server log -----------------------------------------------------


@pytest.mark.postgres
def test_logfiles_find_the_fatal_line_postgres_just_wrote(tmp_path: Path) -> None:
    pattern = postgres_log_glob()
    before = log_sizes(pattern)
    name = provoke_postgres_fatal()
    wait_for_line(pattern, name, since=before)
    settings = load_settings({"SUPERBIZ_LOG_FILES": f"postgres={pattern}"}, cwd=tmp_path)
    runner = ToolRunner(configured_backend(settings), InMemoryLedger())
    args = {"service": "postgres", "level": "FATAL", "query": name}
    row = call_tool(runner, "query_logs", args, "pg1")

    assert row["status"] == "ok", row["error"]
    refs = evidence_refs(row)
    assert re.fullmatch(
        rf'\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{{3}}Z FATAL postgres: database "{name}" does not '
        "exist",
        refs["logs[0]"],
    ), refs["logs[0]"]
    assert refs["summary"].endswith("matched 1 of 1 (complete)")
