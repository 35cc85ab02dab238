"""Rough edges a new user hits on the command line: ``db prune`` gives SQLite space back,
``sessions export`` keeps an existing file, ``doctor --db`` checks the database, ``kb search``
after ``kb index DIR``, and a quick-start question once a real source switched the sample off."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import apps.cli.main as cli
from tests.test_cli import RUN_VARIABLES

QUESTION = "Why is order-service failing?"


@pytest.fixture(autouse=True)
def offline_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*RUN_VARIABLES, "SUPERBIZ_DEBUG", "SUPERBIZ_RUNBOOKS", "SUPERBIZ_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = cli.main(list(argv))
    except SystemExit as exit_info:
        code = int(exit_info.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def _size(path: Path) -> int:
    wal = path.with_name(path.name + "-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def test_db_prune_gives_the_sqlite_space_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "x.sqlite"
    db = f"sqlite:///{path}"
    for _ in range(4):
        assert run(capsys, "diagnose", "--offline", "--db", db, QUESTION)[0] == 0
    before = _size(path)

    code, out, _ = run(capsys, "db", "prune", "--keep-days", "0", "--db", db)

    assert code == 0, out
    assert "pruned 4 thread(s)" in out
    assert "reclaimed" in out
    assert _size(path) < before * 0.7, (before, _size(path))
    # The records are still there.
    code, out, _ = run(capsys, "sessions", "list", "--json", "--db", db)
    assert code == 0 and len(json.loads(out)) == 4


def test_sessions_export_keeps_an_existing_file_unless_forced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = f"sqlite:///{tmp_path / 'x.sqlite'}"
    assert run(capsys, "diagnose", "--offline", "--db", db, QUESTION)[0] == 0
    code, out, _ = run(capsys, "sessions", "list", "--json", "--db", db)
    diagnosis_id = json.loads(out)[0]["id"]
    scenario = tmp_path / "mine.json"
    scenario.write_text("my own work\n", encoding="utf-8")

    code, out, err = run(
        capsys, "sessions", "export", diagnosis_id, "--scenario", str(scenario), "--db", db
    )

    assert code != 0
    assert scenario.read_text(encoding="utf-8") == "my own work\n"
    assert "exists" in err and "--force" in err, err

    code, out, err = run(
        capsys,
        "sessions",
        "export",
        diagnosis_id,
        "--scenario",
        str(scenario),
        "--db",
        db,
        "--force",
    )

    assert code == 0, err
    assert json.loads(scenario.read_text(encoding="utf-8"))["id"]


def test_doctor_fails_for_an_unreachable_db(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "doctor", "--db", "postgresql://nobody@127.0.0.1:1/none")

    assert code == 1
    line = next(line for line in out.splitlines() if line.startswith("database"))
    assert "FAIL" in line and "127.0.0.1" in line, out


def test_doctor_accepts_a_reachable_or_not_yet_created_db(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "new.sqlite"

    code, out, _ = run(capsys, "doctor", "--db", str(path))

    assert code == 0, out
    assert "does not exist yet" in out
    assert not path.exists()  # doctor creates nothing


def test_kb_search_right_after_kb_index_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "runbooks"
    folder.mkdir()
    (folder / "disk.md").write_text(
        "# DiskFull\n\nThe volume is full: delete old snapshots, then grow the volume.\n",
        encoding="utf-8",
    )
    db = f"sqlite:///{tmp_path / 'kb.sqlite'}"

    assert run(capsys, "kb", "index", str(folder), "--db", db)[0] == 0
    code, out, err = run(capsys, "kb", "search", "volume full snapshots", "--db", db)

    assert code == 0, err
    assert "DiskFull" in out
    assert "SUPERBIZ_RUNBOOKS is not set" in err


def test_kb_search_with_nothing_indexed_says_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = f"sqlite:///{tmp_path / 'kb.sqlite'}"

    code, _, err = run(capsys, "kb", "search", "volume full", "--db", db)

    assert code != 0
    assert "empty" in err and "kb index DIR" in err and "SUPERBIZ_RUNBOOKS" in err, err


def test_only_runbooks_set_says_the_sample_was_switched_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "runbooks"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nnothing\n", encoding="utf-8")
    monkeypatch.setenv("SUPERBIZ_RUNBOOKS", str(folder))
    db = f"sqlite:///{tmp_path / 'x.sqlite'}"

    _, out, err = run(capsys, "diagnose", "--offline", "--json", "--db", db, QUESTION)

    said = out + err
    assert "no log source is configured" in said
    assert "bundled sample" in said and "SUPERBIZ_RUNBOOKS switched it off" in said, said
