"""The command line's edges: versions, one-line errors, exit codes, read-only commands,
terminal-safe output, interrupted runs, busy ports, ignored options and ``db upgrade``."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel

import apps.cli.main as cli
from models.factory import make_model_factory
from state.context import Context
from tests import legacy_schema
from tests.test_cli import CUSTOM_ENVIRONMENT, RUN_VARIABLES

QUESTION = "order-service 为什么报 500？"


@pytest.fixture(autouse=True)
def offline_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*RUN_VARIABLES, "SUPERBIZ_DEBUG"):
        monkeypatch.delenv(name, raising=False)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = cli.main(list(argv))
    except SystemExit as exit_info:
        code = int(exit_info.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--version")

    assert code == 0
    assert out.strip() == f"superbiz {cli.version()}"
    assert cli.version() != "unknown"


def test_cli_output_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    # `superbiz sessions list | head -3`: the reader goes away before the listing is written.
    db = f"sqlite:///{tmp_path / 'x.sqlite'}"
    assert cli.main(["diagnose", "--offline", "--db", db, "Why is order-service failing?"]) == 0
    child = subprocess.Popen(
        [sys.executable, "-m", "apps.cli", "sessions", "list", "--db", db],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()  # before the child has started, so its first write meets a closed pipe
    err = child.stderr.read().decode()
    child.wait(60)

    assert err == "", err
    assert child.returncode == cli.EXIT_FAILED


@pytest.mark.parametrize(
    ("argv", "fragment", "hint"),
    [
        pytest.param(
            ["diagnose", "q", "--bogus"], "unrecognized arguments: --bogus", "superbiz", id="opt"
        ),
        pytest.param(["nosuch"], "invalid choice: 'nosuch'", "superbiz", id="command"),
        pytest.param(
            ["serve", "--port", "x"], "invalid int value: 'x'", "superbiz serve", id="int"
        ),
        pytest.param(["sessions"], "required: ACTION", "superbiz sessions", id="action"),
    ],
)
def test_cli_argument_errors_are_one_line_with_a_hint(
    capsys: pytest.CaptureFixture[str], argv: list[str], fragment: str, hint: str
) -> None:
    code, out, err = run(capsys, *argv)

    assert code == 2
    assert out == ""
    assert err.count("\n") == 1  # no usage block
    assert err.startswith("superbiz: error: ") and fragment in err
    assert err.rstrip().endswith(f"(see: {hint} --help)")


def test_cli_database_outage_exits_3_with_the_right_verb(
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = "postgresql://postgres@127.0.0.1:1/nowhere"
    for argv in (["diagnose", QUESTION], ["sessions", "list"], ["db", "upgrade"]):
        code, _, err = run(capsys, *argv, "--db", url)
        assert code == 3, argv
        assert "cannot connect to PostgreSQL" in err
        assert "diagnosis failed" not in err


def _broken_verifier(role: str, ctx: Context) -> BaseChatModel:
    raise RuntimeError("boom")


def test_cli_unexpected_failure_names_the_command_that_failed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'x.sqlite'}"
    code, out, _ = run(capsys, "diagnose", QUESTION, "--db", db, "--json")
    diagnosis = json.loads(out)["diagnosis_id"]
    monkeypatch.setattr("models.factory.make_model_factory", lambda: _broken_verifier)

    code, _, err = run(capsys, "reverify", diagnosis, "--db", db)

    assert code == 1
    assert err.strip() == "superbiz: error: re-verification failed: RuntimeError: boom"


def test_cli_serve_refuses_a_busy_port_before_saying_it_serves(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, _, err = run(
            capsys, "serve", "--port", str(port), "--db", f"sqlite:///{tmp_path / 's.sqlite'}"
        )

    assert code == 2
    assert f"port {port} on 127.0.0.1 is already in use" in err
    assert "serving" not in err


def test_cli_serve_refuses_invalid_run_settings_in_the_environment(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SUPERBIZ_LANGUAGE", "fr")

    code, _, err = run(capsys, "serve", "--db", f"sqlite:///{tmp_path / 's.sqlite'}")

    assert code == 2
    assert "SUPERBIZ_LANGUAGE is 'fr': it must be 'zh' or 'en'" in err


def test_cli_composer_model_in_offline_mode_says_it_is_ignored(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "diagnose", QUESTION, "--offline", "--composer", "model")

    assert code == 0
    assert "--composer model is ignored in offline mode" in err
    assert "【摘要】" not in out


# --- read-only commands -----------------------------------------------------------------------


def test_cli_read_only_commands_never_create_a_database(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "none" / "x.sqlite"
    db = f"sqlite:///{path}"

    code, _, err = run(capsys, "sessions", "list", "--db", db)
    assert code == 0 and "no diagnoses recorded" in err
    code, out, _ = run(capsys, "sessions", "list", "--db", db, "--json")
    assert code == 0 and json.loads(out) == []
    code, _, err = run(capsys, "sessions", "show", "diag-x", "--db", db)
    assert code == 2 and "no diagnosis 'diag-x'" in err
    code, _, err = run(capsys, "reverify", "diag-x", "--db", db)
    assert code == 2 and "no diagnosis 'diag-x'" in err

    assert not path.exists() and not path.parent.exists()


@pytest.fixture
def read_only_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> Iterator[tuple[str, str]]:
    """A recorded diagnosis in an SQLite file, then the file and its folder made read-only."""
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "x.sqlite"
    db = f"sqlite:///{path}"
    code, out, _ = run(capsys, "diagnose", QUESTION, "--db", db, "--json")
    assert code == 0
    diagnosis = json.loads(out)["diagnosis_id"]
    with sqlite3.connect(path) as conn:  # fold the WAL in, as a copied or backed-up file is
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for entry in folder.iterdir():
        entry.chmod(stat.S_IRUSR | stat.S_IRGRP)
    folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        yield db, diagnosis
    finally:
        folder.chmod(stat.S_IRWXU)
        for entry in folder.iterdir():
            entry.chmod(stat.S_IRUSR | stat.S_IWUSR)


def test_cli_read_only_commands_work_on_a_read_only_file(
    capsys: pytest.CaptureFixture[str], read_only_database: tuple[str, str]
) -> None:
    """(As root the permissions do not bind; the next test checks that nothing writes.)"""
    db, diagnosis = read_only_database
    _check_read_only_commands(capsys, db, diagnosis)


def _check_read_only_commands(capsys: pytest.CaptureFixture[str], db: str, diagnosis: str) -> None:
    code, out, err = run(capsys, "sessions", "list", "--db", db)
    assert code == 0, err
    assert diagnosis in out
    code, out, err = run(capsys, "sessions", "show", diagnosis, "--db", db)
    assert code == 0, err
    assert "verdict    PASS" in out
    code, out, err = run(capsys, "reverify", diagnosis, "--db", db, "--offline")
    assert code == 0, err
    assert "no changes" in out


def test_cli_read_only_commands_open_the_file_read_only(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As root (CI) permissions do not bind: check that nothing writes to the file instead."""
    path = tmp_path / "x.sqlite"
    db = f"sqlite:///{path}"
    code, out, _ = run(capsys, "diagnose", QUESTION, "--db", db, "--json")
    diagnosis = json.loads(out)["diagnosis_id"]
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    before = path.read_bytes()
    opened: list[str] = []
    real_connect = sqlite3.connect

    def spy(database: Any, *args: Any, **kwargs: Any) -> sqlite3.Connection:
        opened.append(str(database))
        return real_connect(database, *args, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", spy)

    _check_read_only_commands(capsys, db, diagnosis)

    assert opened and all(name.endswith("?mode=ro") for name in opened)
    assert path.read_bytes() == before


# --- terminal output --------------------------------------------------------------------------


HOSTILE = "order-service \x1b]0;pwned\x07\x1b[2J\x08\x08 why 500?\u202e"


def test_cli_terminal_output_escapes_control_characters_and_json_keeps_them(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    env = dict(CUSTOM_ENVIRONMENT)
    env["logs"] = [
        {
            **CUSTOM_ENVIRONMENT["logs"][0],
            "message": "StockLedgerTimeoutException \x1b[31mred\x1b[0m\x07",
        }
    ]
    env_file = tmp_path / "env.json"
    env_file.write_text(json.dumps(env), encoding="utf-8")
    db = f"sqlite:///{tmp_path / 'x.sqlite'}"

    code, out, err = run(
        capsys, "diagnose", HOSTILE, "--env", str(env_file), "--db", db, "--thread", "t-esc"
    )
    assert code == 0, err
    assert not _has_controls(out) and not _has_controls(err)

    code, out, _ = run(capsys, "sessions", "list", "--db", db)
    assert code == 0 and not _has_controls(out)
    assert "\\x1b]0;pwned\\x07" in out

    code, out, _ = run(capsys, "sessions", "list", "--db", db, "--json")
    (record,) = json.loads(out)
    assert record["question"] == HOSTILE.strip()  # kept, as escapes in the JSON text
    assert not _has_controls(out)
    assert "\\u001b]0;pwned\\u0007" in out and "\\u202e" in out

    code, out, _ = run(capsys, "sessions", "show", record["id"], "--db", db)
    assert code == 0 and not _has_controls(out)
    assert "\\x1b]0;pwned" in out


def _has_controls(text: str) -> bool:
    return any(
        (ord(ch) < 32 and ch not in "\n\t")
        or 0x7F <= ord(ch) <= 0x9F
        or 0x202A <= ord(ch) <= 0x202E
        for ch in text
    )


# --- interrupted runs -------------------------------------------------------------------------


class _Interrupting:
    """Models that press Ctrl-C when the verifier is first asked, then answer offline."""

    def __init__(self) -> None:
        self.real = make_model_factory()
        self.pressed = False

    def __call__(self, role: str, ctx: Context) -> BaseChatModel:
        if role == "verifier" and not self.pressed:
            self.pressed = True
            raise KeyboardInterrupt
        return self.real(role, ctx)


def test_cli_interrupted_run_prints_the_resume_command_that_finishes_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    models = _Interrupting()
    monkeypatch.setattr("graph.builder.make_model_factory", lambda: models)
    db = f"sqlite:///{tmp_path / 'x.sqlite'}"

    code, _, err = run(
        capsys, "diagnose", QUESTION, "--db", db, "--thread", "t-int", "--lang", "en"
    )

    assert code == 130
    command = f"superbiz diagnose --resume --thread t-int --db {db} --lang en"
    assert f"superbiz: interrupted; resume with: {command}" in err
    code, out, err = run(capsys, *command.split()[1:], "--json")
    assert code == 0, err
    assert json.loads(out)["verdict"] == "PASS"


def test_cli_run_interrupted_before_its_first_checkpoint_says_it_cannot_be_resumed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def interrupt(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr("graph.runner.run_diagnosis", interrupt)

    code, _, err = run(capsys, "diagnose", QUESTION, "--db", f"sqlite:///{tmp_path / 'x.sqlite'}")

    assert code == 130
    assert "it cannot be resumed: ask the question again" in err
    assert [line for line in err.splitlines() if line.startswith("superbiz: interrupted")] == [
        "superbiz: interrupted before the diagnosis saved its first checkpoint; it cannot be "
        "resumed: ask the question again"
    ]


# --- db upgrade -------------------------------------------------------------------------------


def test_cli_db_upgrade_reports_the_migrations_it_applied(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "x.sqlite"
    db = f"sqlite:///{path}"

    code, out, _ = run(capsys, "db", "upgrade", "--db", db)
    assert code == 0
    assert out.strip() == (
        f"SQLite file {path}: schema version 6 (from 0); applied 0001_initial, "
        "0002_thread_owner, 0003_leases_and_run_settings, 0004_runbook_index, "
        "0005_alert_queue, 0006_invocation_seq"
    )
    code, out, _ = run(capsys, "db", "upgrade", "--db", db)
    assert out.strip() == f"SQLite file {path}: schema version 6 (up to date, nothing applied)"
    older = tmp_path / "older.sqlite"  # a database a release of schema version 2 left
    legacy_schema.build(f"sqlite:///{older}", 2)
    code, out, _ = run(capsys, "db", "upgrade", "--db", f"sqlite:///{older}")
    assert out.strip() == (
        f"SQLite file {older}: schema version 6 (from 2); applied 0003_leases_and_run_settings, "
        "0004_runbook_index, 0005_alert_queue, 0006_invocation_seq"
    )


def test_cli_sigint_leaves_a_resumable_checkpoint_and_prints_the_resume_command(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    marker = tmp_path / "stalled"
    db = f"sqlite:///{tmp_path / 'x.sqlite'}"
    child = Path(__file__).with_name("sigint_child.py")
    argv = ["diagnose", QUESTION, "--db", db, "--thread", "t-sigint"]
    env = {k: v for k, v in os.environ.items() if k not in RUN_VARIABLES}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    proc = subprocess.Popen(
        [sys.executable, str(child), str(marker), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, raw_err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = raw_err.decode("utf-8")

    assert proc.returncode == 130, err
    command = f"superbiz diagnose --resume --thread t-sigint --db {db}"
    assert f"superbiz: interrupted; resume with: {command}" in err
    assert "Traceback" not in err
    code, out, err = run(capsys, *command.split()[1:], "--json")
    assert code == 0, err
    assert json.loads(out)["verdict"] == "PASS"


def test_cli_sigint_before_the_first_checkpoint_fails_the_diagnosis_with_one_message(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    marker = tmp_path / "stalled"
    db = f"sqlite:///{tmp_path / 'x.sqlite'}"
    child = Path(__file__).with_name("sigint_child.py")
    argv = ["diagnose", QUESTION, "--db", db, "--thread", "t-early"]
    env = {k: v for k, v in os.environ.items() if k not in RUN_VARIABLES}
    env.update(PYTHONPATH=str(Path(__file__).resolve().parents[1]), STALL_IN_INTAKE="1")
    proc = subprocess.Popen(
        [sys.executable, str(child), str(marker), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, raw_err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = raw_err.decode("utf-8")

    assert proc.returncode == 130, err
    assert [line for line in err.splitlines() if line.startswith("superbiz: interrupted")] == [
        "superbiz: interrupted before the diagnosis saved its first checkpoint; it cannot be "
        "resumed: ask the question again"
    ], err
    assert "resume with" not in err and "Traceback" not in err
    code, out, _ = run(capsys, "sessions", "list", "--db", db, "--json")
    assert code == 0
    (record,) = [r for r in json.loads(out) if r.get("thread_id") == "t-early"]
    assert record["status"] == "failed", record
