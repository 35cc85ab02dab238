"""Files are untrusted input: a NUL byte, a symbolic link out of the folder, an unreadable or a
corrupt file costs that file, never the index or the query, and the message names the file."""

from __future__ import annotations

import gzip
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from evidence import logfiles
from evidence.logfiles import FileLogs
from knowledge.runbooks import RunbookIndex
from tools.backend import BackendError


def _line(minutes_ago: float, level: str, message: str) -> str:
    moment = datetime.now(UTC) - timedelta(minutes=minutes_ago)
    return f"{moment.strftime('%Y-%m-%dT%H:%M:%S')}Z {level} {message}\n"


def _messages(backend: FileLogs, **query: object) -> tuple[list[str], dict[str, object]]:
    output = dict(backend.query_logs(**query))  # type: ignore[arg-type]
    return [str(entry["message"]) for entry in output["logs"]], output  # type: ignore[attr-defined]


# --- runbooks ---------------------------------------------------------------------------------


def test_runbook_with_a_nul_byte_is_indexed_without_it_and_named(
    database_url: str, tmp_path: Path
) -> None:
    folder = tmp_path / "runbooks"
    folder.mkdir()
    (folder / "pool.md").write_text("# Pool exhausted\n\n## Mitigation\n\nRaise the pool size.\n")
    (folder / "binary.md").write_bytes(b"# Disk full\n\n## Mitigation\n\nDelete old\x00 logs.\n")
    said: list[str] = []
    index = RunbookIndex([str(folder)], database=database_url, progress=said.append)
    try:
        report = index.sync()
        assert report.files == 2
        assert index.lookup_knowledge(query="pool exhausted", top_k=1)["documents"][0][
            "source"
        ] == ("runbooks/pool.md")
        disk = index.lookup_knowledge(query="disk full", top_k=1)["documents"][0]
        assert disk["source"] == "runbooks/binary.md"
        assert "\x00" not in disk["chunk"]
    finally:
        index.close()
    assert any("binary.md" in line and "NUL" in line for line in said), said


def test_runbook_links_out_of_the_folder_are_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "private"
    outside.mkdir()
    (outside / "secret.md").write_text("# Root password\n\n## Mitigation\n\nhunter2\n")
    folder = tmp_path / "runbooks"
    folder.mkdir()
    (folder / "pool.md").write_text("# Pool exhausted\n\n## Mitigation\n\nRaise the pool size.\n")
    (folder / "secret.md").symlink_to(outside / "secret.md")
    (folder / "inside.md").symlink_to(folder / "pool.md")
    said: list[str] = []
    index = RunbookIndex(
        [str(folder)], database=f"sqlite:///{tmp_path / 'kb.sqlite'}", progress=said.append
    )
    try:
        index.sync()
        found = index.lookup_knowledge(query="root password hunter2", top_k=5)["documents"]
        assert all("hunter2" not in document["chunk"] for document in found)
    finally:
        index.close()
    assert any("secret.md" in line and "outside" in line for line in said), said


# --- log files --------------------------------------------------------------------------------


def test_log_glob_links_out_of_its_folder_are_not_read(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "app.log").write_text(_line(5, "ERROR", "payment declined"))
    private = tmp_path / "private.log"
    private.write_text(_line(4, "ERROR", "root password is hunter2"))
    (logs / "private.log").symlink_to(private)
    backend = FileLogs([("app", str(logs / "*.log"))])

    messages, output = _messages(backend, service="app")

    assert messages == ["payment declined"]
    assert any("private.log" in note for note in output.get("unread", [])), output  # type: ignore[attr-defined]


def _deny(monkeypatch: pytest.MonkeyPatch, denied: Path) -> None:
    """Reading ``denied`` fails with EACCES, as for a file of another user (tests run as root)."""
    real = logfiles._scan_backwards

    def scan(path: str, *args: Any) -> None:
        if Path(path) == denied:
            raise PermissionError(13, "Permission denied", path)
        real(path, *args)

    monkeypatch.setattr(logfiles, "_scan_backwards", scan)


def test_an_unreadable_log_file_is_a_gap_naming_it_not_a_failed_query(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "app.log").write_text(_line(5, "ERROR", "payment declined"))
    broken = logs / "app.2.log"
    broken.write_text(_line(3, "ERROR", "unseen"))
    _deny(monkeypatch, broken)
    backend = FileLogs([("app", str(logs / "*.log"))])

    messages, output = _messages(backend, service="app")

    assert messages == ["payment declined"]
    notes = output.get("unread", [])
    assert notes == [f"{broken} (Permission denied)"], output


def test_a_corrupt_gzip_log_names_the_file(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "app.log.1.gz").write_bytes(gzip.compress(_line(5, "ERROR", "ok").encode())[:-12])
    backend = FileLogs([("app", str(logs / "app.log*"))])

    try:
        messages, output = _messages(backend, service="app")
    except BackendError as exc:  # every file unreadable: the error names the file
        assert "app.log.1.gz" in str(exc)
    else:
        notes = output.get("unread", [])
        assert notes and "app.log.1.gz" in notes[0], output  # type: ignore[index]


def test_a_query_whose_every_file_is_unreadable_fails_naming_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    only = logs / "app.log"
    only.write_text(_line(3, "ERROR", "unseen"))
    _deny(monkeypatch, only)
    backend = FileLogs([("app", str(logs / "*.log"))])

    with pytest.raises(BackendError, match="app.log .Permission denied"):
        backend.query_logs(service="app")
