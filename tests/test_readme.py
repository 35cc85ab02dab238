"""The README's quick start stays true: two commands, the demo, and the CI test command."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _quick_start_commands() -> list[str]:
    readme = ROOT.joinpath("README.md").read_text(encoding="utf-8")
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, re.DOTALL)]


def test_readme_quick_start_is_two_commands() -> None:
    commands = _quick_start_commands()
    assert len(commands) == 2
    assert all("\n" not in command for command in commands)
    assert "superbiz diagnose" in commands[0]
    assert '".[dev]"' in commands[1] and "pytest" in commands[1]


def test_readme_test_command_is_what_ci_runs() -> None:
    test_command = _quick_start_commands()[1]
    ci_lines = ROOT.joinpath(".ci", "run").read_text(encoding="utf-8").splitlines()
    assert test_command in ci_lines
