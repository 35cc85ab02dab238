"""Backend configuration: variables and superbiz.toml, checked with clear errors, secrets masked."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from apps.cli.doctor import config_show_command
from apps.cli.main import main
from evidence.composed import ComposedBackend, configured_backend
from evidence.config import ConfigError, Settings, describe, load_settings
from evidence.sample import SampleBackend

TOKEN = "tok-7f3a-very-secret"
PASSWORD = "pw-91c2-very-secret"


def _settings(env: dict[str, str], tmp_path: Path, toml: str | None = None) -> Settings:
    if toml is not None:
        (tmp_path / "superbiz.toml").write_text(toml)
    return load_settings(env, cwd=tmp_path)


def _prometheus(**settings: str) -> dict[str, str]:
    """Variables for a Prometheus at ``http://h``, plus ``SUPERBIZ_PROMETHEUS_<name>`` settings."""
    return {
        "SUPERBIZ_PROMETHEUS_URL": "http://h",
        **{f"SUPERBIZ_PROMETHEUS_{name}": value for name, value in settings.items()},
    }


def test_config_nothing_set_is_the_sample(tmp_path: Path) -> None:
    settings = load_settings({}, cwd=tmp_path)
    assert not settings.real
    assert settings.service_labels == ("service", "job", "app")
    assert settings.query_timeout_s == 20
    assert isinstance(configured_backend(settings), SampleBackend)


def test_config_reads_superbiz_toml_and_a_variable_wins(tmp_path: Path) -> None:
    toml = """
query_timeout_s = 7
service_label = ["app", "service"]

[prometheus]
url = "http://file.example:9090/"
headers = {"X-Scope-OrgID" = "team-a"}
max_series = 5

[alertmanager]
url = "http://am.example:9093"
"""
    (tmp_path / "superbiz.toml").write_text(toml)
    settings = load_settings(
        {"SUPERBIZ_PROMETHEUS_URL": "http://env.example:9090", "SUPERBIZ_QUERY_TIMEOUT_S": "3"},
        cwd=tmp_path,
    )
    prometheus = settings.backend("prometheus")
    assert prometheus is not None
    assert prometheus.url == "http://env.example:9090"
    assert dict(prometheus.headers) == {"X-Scope-OrgID": "team-a"}
    assert prometheus.options["max_series"] == 5
    assert settings.query_timeout_s == 3
    assert settings.service_labels == ("app", "service")
    assert settings.backend("alertmanager") is not None
    assert settings.origins["SUPERBIZ_PROMETHEUS_URL"] == "environment"
    assert settings.origins["SUPERBIZ_PROMETHEUS_HEADERS"] == str(tmp_path / "superbiz.toml")
    assert isinstance(configured_backend(settings), ComposedBackend)


def test_config_superbiz_config_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "elsewhere.toml"
    path.write_text('[prometheus]\nurl = "http://127.0.0.1:9090"\n')
    settings = load_settings({"SUPERBIZ_CONFIG": str(path)}, cwd=tmp_path / "..")
    assert settings.config_file == str(path)
    with pytest.raises(ConfigError, match="SUPERBIZ_CONFIG=.*missing.toml: no such file"):
        load_settings({"SUPERBIZ_CONFIG": str(tmp_path / "missing.toml")}, cwd=tmp_path)


@pytest.mark.parametrize(
    ("env", "toml", "message"),
    [
        ({"SUPERBIZ_PROMETHEUS_URL": "ftp://x"}, None, "SUPERBIZ_PROMETHEUS_URL=ftp://x must be"),
        ({"SUPERBIZ_PROMETHEUS_TOKEN": "t"}, None, "SUPERBIZ_PROMETHEUS_URL is not"),
        ({"SUPERBIZ_PROMETHEUS_TOKN": "t"}, None, "unknown setting SUPERBIZ_PROMETHEUS_TOKN"),
        (_prometheus(HEADERS="{nope"), None, "SUPERBIZ_PROMETHEUS_HEADERS must be a JSON object"),
        (
            _prometheus(INSECURE="maybe"),
            None,
            "SUPERBIZ_PROMETHEUS_INSECURE='maybe' must be 1/true",
        ),
        (_prometheus(USER="u"), None, "set SUPERBIZ_PROMETHEUS_PASSWORD too"),
        (
            _prometheus(CA_FILE="/no/ca.pem"),
            None,
            "SUPERBIZ_PROMETHEUS_CA_FILE=/no/ca.pem: no such file",
        ),
        ({"SUPERBIZ_QUERY_TIMEOUT_S": "0"}, None, "SUPERBIZ_QUERY_TIMEOUT_S='0' must be"),
        ({"SUPERBIZ_SERVICE_LABEL": "ser vice"}, None, "SUPERBIZ_SERVICE_LABEL='ser vice'"),
        ({}, "[prometheus]\nurll = 'x'\n", "unknown key prometheus.urll in"),
        ({}, "[prometheus]\nurl = 'http://h'\nmax_series = 500\n", "prometheus.max_series in"),
        ({}, "timeout = 3\n", "unknown key timeout in"),
        ({}, "[prometheus\n", "is not valid TOML"),
    ],
    ids=[
        "bad-scheme",
        "token-without-url",
        "misspelt-variable",
        "headers-not-json",
        "insecure-not-a-boolean",
        "user-without-password",
        "missing-ca-file",
        "zero-timeout",
        "bad-label",
        "misspelt-file-key",
        "max-series-out-of-range",
        "unknown-top-level-key",
        "broken-toml",
    ],
)
def test_config_bad_settings_name_the_setting_and_the_fix(
    env: dict[str, str], toml: str | None, message: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match=message.replace("?", r"\?").replace("(", r"\(")):
        _settings(env, tmp_path, toml)


def test_config_errors_never_show_a_secret(tmp_path: Path) -> None:
    cases = [
        {"SUPERBIZ_PROMETHEUS_URL": f"http://u:{PASSWORD}@h:9090"},
        _prometheus(TOKEN=TOKEN, USER="u", PASSWORD=PASSWORD),
        _prometheus(HEADERS=f'["{TOKEN}"]'),
        _prometheus(PASSWORD=PASSWORD),
    ]
    for env in cases:
        with pytest.raises(ConfigError) as caught:
            load_settings(env, cwd=tmp_path)
        assert TOKEN not in str(caught.value) and PASSWORD not in str(caught.value)


def test_config_show_masks_secrets_and_repr_hides_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {
        "SUPERBIZ_PROMETHEUS_URL": "http://127.0.0.1:9090",
        "SUPERBIZ_PROMETHEUS_TOKEN": TOKEN,
        "SUPERBIZ_PROMETHEUS_HEADERS": f'{{"X-Scope-OrgID": "team-a", "X-Key": "{PASSWORD}"}}',
        "SUPERBIZ_ALERTMANAGER_URL": "http://127.0.0.1:9093",
        "SUPERBIZ_ALERTMANAGER_USER": "ops",
        "SUPERBIZ_ALERTMANAGER_PASSWORD": PASSWORD,
    }
    settings = load_settings(env, cwd=tmp_path)
    shown = "\n".join(f"{n} {v} {o}" for n, v, o in describe(settings))
    assert "SUPERBIZ_PROMETHEUS_TOKEN **** environment" in shown
    assert "SUPERBIZ_ALERTMANAGER_PASSWORD ****" in shown
    assert '{"X-Scope-OrgID": "****", "X-Key": "****"}' in shown
    assert "SUPERBIZ_ALERTMANAGER_USER ops" in shown
    assert TOKEN not in shown and PASSWORD not in shown
    assert TOKEN not in repr(settings) and PASSWORD not in repr(settings)

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    out, err = io.StringIO(), io.StringIO()
    assert config_show_command(out, err) == 0
    assert "SUPERBIZ_PROMETHEUS_TOKEN" in out.getvalue()
    assert TOKEN not in out.getvalue() and PASSWORD not in out.getvalue()
    assert "metrics: prometheus + alertmanager" in out.getvalue()


def test_config_bad_configuration_is_a_one_line_usage_error_in_diagnose(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SUPERBIZ_PROMETHEUS_URL", "not a url")
    assert main(["diagnose", "--offline", "is order-service failing?"]) == 2
    assert "SUPERBIZ_PROMETHEUS_URL=not a url must be" in capsys.readouterr().err


def test_config_without_real_backend_quick_start_is_unchanged(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["config", "show"]) == 0
    assert "evidence: sample: logs, metrics, knowledge, time" in capsys.readouterr().out
