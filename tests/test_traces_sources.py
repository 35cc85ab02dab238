"""Trace sources: OTLP files (plain and .gz, newest first, bounded), settings, config show.

Files hold what the OpenTelemetry Collector's file exporter writes (one OTLP JSON request per
line), made from spans of the real OpenTelemetry SDK (``tests.traces_kit``).
"""

from __future__ import annotations

import gzip
import io
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from apps.cli.doctor import config_show_command
from evidence.composed import configured_backend, part_names
from evidence.config import ConfigError, load_settings
from evidence.environment import parse_environment
from evidence.traces.files import FileTraces
from tests.backend_kit import evidence_refs, get_healthz, run_doctor, run_tool
from tests.traces_kit import hex_ids, otlp_request, shop_request, shop_spans
from tools.query_traces import TracesRequest

WINDOW: dict[str, Any] = {"start": "2026-03-01T09:55:00Z", "end": "2026-03-01T10:30:00Z"}
AFTER = datetime(2026, 3, 1, 10, 30, tzinfo=UTC).timestamp()


def _write(path: Path, lines: list[dict[str, object]], *, mtime: float = AFTER) -> Path:
    text = "".join(json.dumps(line) + "\n" for line in lines).encode()
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text))
    else:
        path.write_bytes(text)
    os.utime(path, (mtime, mtime))
    return path


def _per_span_lines() -> list[dict[str, object]]:
    """The shop's spans, one request per trace, in time order (as batches arrive)."""
    request = hex_ids(otlp_request(shop_spans()))
    lines: dict[str, dict[str, object]] = {}
    for resource_spans in request["resourceSpans"]:
        for scope in resource_spans["scopeSpans"]:
            for span in scope["spans"]:
                line = lines.setdefault(span["traceId"], {"resourceSpans": []})
                batch = {**resource_spans, "scopeSpans": [{**scope, "spans": [span]}]}
                line["resourceSpans"].append(batch)  # type: ignore[attr-defined]
    return list(lines.values())


def test_trace_files_plain_and_gz_answer_alike(tmp_path: Path) -> None:
    lines = _per_span_lines()
    _write(tmp_path / "traces.json", lines[5:])
    _write(tmp_path / "traces-1.json.gz", lines[:5], mtime=AFTER - 60)
    env = {"SUPERBIZ_TRACE_FILES": str(tmp_path / "traces*.json*")}

    row = run_tool(env, tmp_path, "query_traces", {"service": "payment-service", **WINDOW})

    assert row["status"] == "ok", row["error"]
    refs = evidence_refs(row)
    assert refs["edges[0]"] == (
        "checkout -> payment-service calls=10 errors=2 p50=28ms p90=900ms p99=900ms max=900ms"
    )
    assert refs["summary"].endswith("operations 1 of 1, edges 3 of 3, traces 10 of 10 (complete)")


def test_trace_files_skip_files_written_before_the_window(tmp_path: Path) -> None:
    _write(tmp_path / "old.json", [{"not": "read"}], mtime=AFTER - 86_400)
    os.chmod(tmp_path / "old.json", 0)  # opening it would fail: it must not be opened
    _write(tmp_path / "new.json", [shop_request()])
    source = FileTraces([str(tmp_path / "*.json")])

    answer = source.find_traces(TracesRequest(service="checkout", **WINDOW))

    assert answer["traces_total"] == 10


def test_trace_files_cap_spans_and_say_at_least(tmp_path: Path) -> None:
    _write(tmp_path / "t.json", _per_span_lines())
    source = FileTraces([str(tmp_path / "t.json")], max_spans=12)

    answer = source.find_traces(TracesRequest(limit=2, **WINDOW))

    assert answer.get("traces_total_at_least") is True
    assert answer["traces_total"] == 3  # 12 spans: three whole traces, newest first


def test_trace_files_do_not_follow_a_symlink_out_of_the_folder(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    inside = tmp_path / "traces"
    outside.mkdir()
    inside.mkdir()
    _write(outside / "secret.json", [shop_request()])
    (inside / "link.json").symlink_to(outside / "secret.json")
    _write(inside / "own.json", [shop_request(2)])
    source = FileTraces([str(inside / "*.json")])

    answer = source.find_traces(TracesRequest(**WINDOW))

    assert answer["traces_total"] == 2


def test_trace_files_overlong_and_broken_lines_are_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("evidence.traces.files.MAX_LINE_BYTES", 20_000)
    path = tmp_path / "t.json"
    big = {"resourceSpans": [], "pad": "x" * 50_000}
    path.write_text(json.dumps(shop_request(3)) + "\n{broken\n" + json.dumps(big) + "\n")
    os.utime(path, (AFTER, AFTER))

    answer = FileTraces([str(path)]).find_traces(TracesRequest(**WINDOW))

    assert answer["traces_total"] == 3


def test_trace_settings_one_source_at_most(tmp_path: Path) -> None:
    env = {"SUPERBIZ_TRACE_FILES": "t/*.json", "SUPERBIZ_TEMPO_URL": "http://127.0.0.1:3200"}

    with pytest.raises(ConfigError, match="at most one trace source"):
        load_settings(env, cwd=tmp_path)
    settings = load_settings({"SUPERBIZ_TRACE_FILES": "t/*.json"}, cwd=tmp_path)
    assert settings.trace_files == (str(tmp_path / "t/*.json"),)
    assert "traces: OTLP trace files" in "\n".join(part_names(configured_backend(settings)))


def test_trace_settings_config_show_masks_the_tempo_token(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SUPERBIZ_TEMPO_URL", "https://tempo.example:3200")
    monkeypatch.setenv("SUPERBIZ_TEMPO_TOKEN", "s3cret-token")
    monkeypatch.setenv("SUPERBIZ_TEMPO_TENANT", "team-a")
    out, err = io.StringIO(), io.StringIO()

    config_show_command(out, err)

    text = out.getvalue()
    assert "s3cret-token" not in text
    assert "SUPERBIZ_TEMPO_TOKEN" in text and "team-a" in text
    assert "traces: tempo" in text


def test_trace_files_doctor_and_services(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "t.json", [shop_request(2)])
    env = {"SUPERBIZ_TRACE_FILES": str(tmp_path / "*.json")}

    code, out, _ = run_doctor(monkeypatch, env, as_json=True)

    report = next(r for r in json.loads(out)["backends"] if r["backend"] == "trace_files")
    assert report["status"] == "ok" and report["detail"].startswith("1 file, ")
    source = FileTraces(
        [str(tmp_path / "*.json")], now=lambda: datetime(2026, 3, 1, 10, 30, tzinfo=UTC)
    )
    assert source.services() == ["checkout", "frontend", "payment-service", "payments-db"]


def test_trace_env_file_serves_traces_beside_a_real_source(tmp_path: Path) -> None:
    env_file = parse_environment(json.dumps({"traces": shop_request(3)}), origin="t")
    settings = load_settings({"SUPERBIZ_PROMETHEUS_URL": "http://127.0.0.1:9"}, cwd=tmp_path)

    backend = configured_backend(settings, environment=env_file)

    answer = backend.find_traces(TracesRequest(service="checkout"))  # type: ignore[attr-defined]
    assert answer["traces_total"] == 3
    assert "payment-service" in backend.services()


def test_trace_files_healthz_reports_the_trace_source(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SUPERBIZ_TRACE_FILES", str(tmp_path / "missing-*.json"))

    status, body = get_healthz(tmp_path)

    report = body["backends"]["trace_files"]
    assert report["status"] == "error"
    assert report["setting"] == "SUPERBIZ_TRACE_FILES"
    assert "no file matches" in report["detail"]
