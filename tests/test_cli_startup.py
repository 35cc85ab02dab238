"""The quick commands start without LangGraph, langchain or a model client.

``superbiz --help``, ``sessions list`` and ``db upgrade`` are what a user runs most often by
hand; importing LangGraph and langchain (and through them langsmith and openai) would make each
of them take a second. Each command runs in a fresh interpreter, which then lists the heavy
packages it imported.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("langgraph", "langchain_core", "langchain_openai", "langsmith", "openai")

PROBE = """
import contextlib, io, json, sys
from apps.cli.main import main
out = io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
    try:
        code = main(json.loads(sys.argv[1]))
    except SystemExit as exc:
        code = exc.code
heavy = sorted({name.split(".")[0] for name in sys.modules} & set(json.loads(sys.argv[2])))
print(json.dumps({"code": code, "heavy": heavy, "out": out.getvalue()}))
"""


def probe(*argv: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(list(argv)), json.dumps(HEAVY)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["db", "upgrade"], ["sessions", "list"], ["sessions", "list", "--json"]],
    ids=["help", "db-upgrade", "sessions-list", "sessions-list-json"],
)
def test_cli_quick_commands_import_no_langgraph_nor_model_client(
    argv: list[str], tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'audit.sqlite'}"
    probe("db", "upgrade", "--db", db)  # the listing reads an existing database
    result = probe(*argv, *([] if argv == ["--help"] else ["--db", db]))
    assert result["code"] == 0, result
    assert result["heavy"] == [], result
    if argv == ["--help"]:
        assert "diagnose" in str(result["out"])


def test_cli_diagnose_still_imports_what_it_needs(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'audit.sqlite'}"
    result = probe("diagnose", "--offline", "--json", "--db", db, "is order-service failing?")
    assert result["code"] == 0, result
    assert "langgraph" in result["heavy"]
    assert json.loads(str(result["out"]))["verdict"] in ("PASS", "LOW_CONFID", "REJECT")
