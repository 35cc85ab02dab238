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


def _section(title: str) -> str:
    readme = ROOT.joinpath("README.md").read_text(encoding="utf-8")
    return readme.split(title, 1)[1].split("\n#", 1)[0]


def test_readme_environment_file_example_is_a_valid_environment() -> None:
    from tools.environment import ENVIRONMENT_KEYS, parse_environment

    section = _section("### Environment files")
    (example,) = re.findall(r"```json\n(.*?)```", section, re.DOTALL)
    environment = parse_environment(example, origin="README")
    assert set(environment) == set(ENVIRONMENT_KEYS)
    sample = re.search(r"\]\((tools/data/[a-z_]+\.json)\)", section)
    assert sample is not None and ROOT.joinpath(sample.group(1)).is_file()
    for key in ENVIRONMENT_KEYS:
        assert f"| `{key}` |" in section


def test_readme_lists_every_run_setting_variable() -> None:
    from state.settings import RULES

    readme = ROOT.joinpath("README.md").read_text(encoding="utf-8")
    for rule in RULES:
        if rule.name.endswith("_model") and rule.name != "model":
            continue  # the per-role overrides share one row
        assert f"`{rule.variable}" in readme, rule.variable
