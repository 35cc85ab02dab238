"""Backend configuration: environment variables and an optional TOML file, checked once.

Every setting has a variable (``SUPERBIZ_PROMETHEUS_URL``) and the same key in the TOML file
(``url`` in the ``[prometheus]`` table; top-level settings such as ``query_timeout_s`` at the top).
The file is ``SUPERBIZ_CONFIG`` when set, else ``superbiz.toml`` in the working directory when it
exists; a variable wins over the file. Values are validated here by pydantic into plain frozen
records (``Settings``, ``BackendSettings``); nothing behind this module reads the environment.

Each backend has the same connection keys: ``url``, ``token`` (bearer), ``user`` / ``password``
(basic), ``headers`` (a JSON object, or a TOML table), ``ca_file`` / ``insecure`` (TLS), plus keys
of its own (``BACKEND_SPECS``). A backend is configured when its ``url`` is set. Secrets (token,
password, header values) never appear in a message, a ``repr`` or ``describe``: errors name the
variable or key, never a secret's value.

Two sources are no HTTP backends: local log files (``SUPERBIZ_LOG_FILES``, ``service=glob`` pairs
separated by ``;``) and runbook folders (``SUPERBIZ_RUNBOOKS``, folders separated by ``;``). At most
one log source (Loki, OpenSearch, log files) may be configured.
"""

from __future__ import annotations

import json
import math
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from state import json_shape
from state.settings import FALSE_WORDS, TRUE_WORDS

PREFIX = "SUPERBIZ_"
CONFIG_VARIABLE = "SUPERBIZ_CONFIG"
DEFAULT_FILE = "superbiz.toml"
DEFAULT_SERVICE_LABELS: tuple[str, ...] = ("service", "job", "app")
DEFAULT_QUERY_TIMEOUT_S = 20.0
MASK = "****"
DEFAULT_OPENSEARCH_INDEX = "logs-*"
DEFAULT_OPENSEARCH_FIELDS: dict[str, str] = {
    "timestamp": "@timestamp",
    "level": "level",
    "service": "service",
    "instance": "host",
    "message": "message",
}
"""The document field of each role, unless ``SUPERBIZ_OPENSEARCH_FIELDS`` names another."""

CONNECTION_KEYS = ("url", "token", "user", "password", "headers", "ca_file", "insecure")
SECRET_KEYS = frozenset({"token", "password"})
_LABEL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ConfigError(ValueError):
    """The configuration cannot be used; the message names the setting and the fix."""


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class BackendSettings:
    """How to reach one backend (``name`` is ``prometheus``, ``alertmanager``, ...)."""

    name: str
    url: str
    token: str | None = field(default=None, repr=False)
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    ca_file: str | None = None
    insecure: bool = False
    options: Mapping[str, Any] = field(default_factory=dict)
    """The backend's own keys (``BACKEND_SPECS``), validated, defaults filled."""

    def variable(self, key: str) -> str:
        """The environment variable of one of this backend's keys."""
        return variable_name(self.name, key)

    def secrets(self) -> list[str]:
        """Every secret value of this backend (for redaction), longest first."""
        values = [self.token, self.password, *self.headers.values()]
        return sorted({v for v in values if v}, key=len, reverse=True)


@dataclass(frozen=True)
class Settings:
    """The effective configuration of every backend."""

    backends: Mapping[str, BackendSettings]
    """Configured backends by name (those with a URL)."""
    service_labels: tuple[str, ...] = DEFAULT_SERVICE_LABELS
    query_timeout_s: float = DEFAULT_QUERY_TIMEOUT_S
    config_file: str | None = None
    """The TOML file that was read, if any."""
    origins: Mapping[str, str] = field(default_factory=dict)
    """Where each set variable came from: ``environment`` or the file's path."""
    log_files: tuple[tuple[str, str], ...] = ()
    """``(service, glob)`` pairs of local log files, in the order given."""
    runbooks: tuple[str, ...] = ()
    """Folders of Markdown runbooks (absolute paths)."""

    def backend(self, name: str) -> BackendSettings | None:
        """One configured backend, or None."""
        return self.backends.get(name)

    @property
    def real(self) -> bool:
        """Whether any real source is configured (else the bundled sample is used)."""
        return bool(self.backends or self.log_files or self.runbooks)

    @property
    def log_source(self) -> str | None:
        """The configured log source (``loki``, ``opensearch``, ``log_files``), or None."""
        if self.log_files:
            return "log_files"
        return next((name for name in LOG_SOURCES if name in self.backends), None)

    def secrets(self) -> list[str]:
        """Every secret value of every backend, longest first."""
        found = {s for b in self.backends.values() for s in b.secrets()}
        return sorted(found, key=len, reverse=True)


# --------------------------------------------------------------------------- specs


def _positive_int(low: int, high: int) -> Callable[[object], int]:
    def check(value: object) -> int:
        number = _integer(value)
        if number is None or not low <= number <= high:
            raise ValueError(f"must be a whole number from {low} to {high}")
        return number

    return check


def _tenant(value: object) -> str:
    name = json_shape.text(value)
    if name is None or any(c in name for c in "\r\n"):
        raise ValueError("must be a tenant name (one line of text)")
    return name


def _index_pattern(value: object) -> str:
    text = json_shape.text(value) or ""
    if not text or not re.fullmatch(r'[^\s/\\?"<>|#]+', text):
        raise ValueError(
            "must be an index name or pattern without spaces, / or ?, e.g. logs-* or app-*,web-*"
        )
    return text


def _log_fields(value: object) -> dict[str, str]:
    data = _json_object(value)
    unknown = sorted(str(k) for k in data if k not in DEFAULT_OPENSEARCH_FIELDS)
    if unknown:
        raise ValueError(
            f"has unknown field role(s) {', '.join(unknown)}; the roles are "
            + ", ".join(DEFAULT_OPENSEARCH_FIELDS)
        )
    fields = json_shape.string_map(data)
    if fields is None:
        raise ValueError("must map each role to a field name (a non-empty string)")
    return {**DEFAULT_OPENSEARCH_FIELDS, **{k: v.strip() for k, v in fields.items()}}


def _string_map(value: object) -> dict[str, str]:
    mapped = json_shape.string_map(_json_object(value))
    if mapped is None:
        raise ValueError("must map each name to a non-empty string")
    return mapped


def _as_json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


@dataclass(frozen=True)
class OptionSpec:
    """One backend-specific key: its check, its default and what it means."""

    check: Callable[[object], Any]
    default: Any
    help: str
    secret: bool = False
    show: Callable[[Any], str] = str
    """How ``describe`` shows the checked value."""


BACKEND_SPECS: dict[str, dict[str, OptionSpec]] = {
    "prometheus": {
        "max_series": OptionSpec(
            _positive_int(1, 100), 20, "series returned per query at most (1-100)"
        ),
        "standard_queries": OptionSpec(
            _string_map,
            None,
            "JSON object name -> PromQL template ($label, $service) queried for a service",
            show=_as_json,
        ),
    },
    "alertmanager": {},
    "loki": {
        "tenant": OptionSpec(
            _tenant, None, "tenant sent as X-Scope-OrgID (a multi-tenant Loki, Grafana Cloud)"
        ),
    },
    "opensearch": {
        "index": OptionSpec(
            _index_pattern, DEFAULT_OPENSEARCH_INDEX, "index pattern searched (default logs-*)"
        ),
        "fields": OptionSpec(
            _log_fields,
            dict(DEFAULT_OPENSEARCH_FIELDS),
            "JSON object naming the document fields: timestamp, level, service, instance, "
            "message (defaults @timestamp, level, service, host, message)",
            show=_as_json,
        ),
    },
}
"""The backends this version knows, with their own keys besides ``CONNECTION_KEYS``."""

LOG_SOURCES = ("loki", "opensearch", "log_files")
"""The log sources; at most one may be configured."""

TOP_LEVEL_HELP = {
    "config": "TOML file with these settings (default ./superbiz.toml when it exists)",
    "query_timeout_s": "seconds one backend request may take (default 20)",
    "service_label": "labels naming a service, tried in order (default service,job,app)",
    "log_files": "local log files: service=glob pairs separated by ; "
    "(e.g. postgres=/var/log/postgresql/*.log;api=/srv/api/*.jsonl)",
    "runbooks": "folders of Markdown runbooks and postmortems, separated by ;",
}
CONNECTION_HELP = {
    "url": "base URL of the API",
    "token": "bearer token",
    "user": "basic-auth user",
    "password": "basic-auth password",
    "headers": 'extra request headers, a JSON object, e.g. {"X-Scope-OrgID": "team-a"}',
    "ca_file": "CA bundle (PEM) to verify the server's certificate",
    "insecure": "1 to skip TLS certificate verification",
}


def variable_name(backend: str | None, key: str) -> str:
    """``SUPERBIZ_<BACKEND>_<KEY>`` (or ``SUPERBIZ_<KEY>`` for a top-level setting)."""
    middle = f"{backend.upper()}_" if backend else ""
    return f"{PREFIX}{middle}{key.upper()}"


def known_variables() -> list[str]:
    """Every variable this module reads, in documentation order."""
    names = [variable_name(None, key) for key in TOP_LEVEL_HELP]
    for backend, options in BACKEND_SPECS.items():
        names += [variable_name(backend, key) for key in (*CONNECTION_KEYS, *options)]
    return names


# --------------------------------------------------------------------------- value checks


def _integer(value: object) -> int | None:
    """A whole number given as a TOML integer or as text (a bool or a float is none)."""
    given = json_shape.scalar_text(value)
    return int(given) if given is not None and given.lstrip("-").isdigit() else None


def _json_object(value: object) -> dict[str, Any]:
    if isinstance(value, str):
        value = json_shape.loads(
            value,
            lambda exc: ValueError(f"must be a JSON object (invalid JSON at character {exc.pos})"),
        )
    if not isinstance(value, dict):
        raise ValueError('must be a JSON object, e.g. {"X-Scope-OrgID": "team-a"}')
    return value


def _boolean(value: object) -> bool:
    """A flag given as a TOML boolean (its text is true or false) or as text."""
    text = str(value).strip().lower()
    if text in TRUE_WORDS:
        return True
    if text in ("", *FALSE_WORDS):
        return False
    raise ValueError("must be " + "/".join(TRUE_WORDS) + " or " + "/".join(FALSE_WORDS))


_TYPE_ERRORS = {"string_type": "must be a string"}
"""How a type error pydantic found in a connection key reads (the key's own checks say more)."""


class _Connection(BaseModel):
    """The connection keys of any backend, checked where they enter."""

    model_config = ConfigDict(extra="forbid")

    url: str
    token: str | None = None
    user: str | None = None
    password: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    ca_file: str | None = None
    insecure: bool = False

    @field_validator("url", mode="before")
    @classmethod
    def _url(cls, value: object) -> str:
        text = json_shape.text(value)
        if text is None:
            raise ValueError("must be a URL, e.g. http://127.0.0.1:9090")
        try:
            parts = urlsplit(text)
            parts.port  # noqa: B018 - raises on a bad port
        except ValueError:
            raise ValueError("is not a valid URL; expected e.g. http://127.0.0.1:9090") from None
        if parts.password is not None:
            raise ValueError(
                "must not carry a password; put the credentials in _USER and _PASSWORD"
            )
        if parts.scheme not in {"http", "https"} or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL with a host")
        return text.rstrip("/")

    @field_validator("token", "user", "password", "ca_file")
    @classmethod
    def _text(cls, value: str | None) -> str | None:
        return value.strip() or None if value is not None else None

    @field_validator("headers", mode="before")
    @classmethod
    def _headers(cls, value: object) -> dict[str, str]:
        data = _json_object(value)
        headers: dict[str, str] = {}
        for name, item in data.items():
            if not re.fullmatch(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+", str(name)):
                raise ValueError(f"has an invalid header name {name!r}")
            if not isinstance(item, str):
                raise ValueError(f"header {name!r} must have a string value")
            headers[str(name)] = item
        return headers

    @field_validator("insecure", mode="before")
    @classmethod
    def _insecure(cls, value: object) -> bool:
        return _boolean(value)


# --------------------------------------------------------------------------- loading


def _read_file(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except OSError as exc:
        raise ConfigError(f"cannot read the configuration file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None


def _config_path(environ: Mapping[str, str], cwd: Path) -> Path | None:
    named = environ.get(CONFIG_VARIABLE, "").strip()
    if named:
        path = Path(named).expanduser()
        path = path if path.is_absolute() else cwd / path
        if not path.is_file():
            raise ConfigError(
                f"{CONFIG_VARIABLE}={named}: no such file; create it or unset {CONFIG_VARIABLE}"
            )
        return path
    default = cwd / DEFAULT_FILE
    return default if default.is_file() else None


class _Origin:
    """Where one setting came from, for messages: the variable, or the key in the file."""

    def __init__(self, path: Path | None) -> None:
        self.path = path

    def name(self, backend: str | None, key: str, from_env: bool) -> str:
        if from_env or self.path is None:
            return variable_name(backend, key)
        dotted = f"{backend}.{key}" if backend else key
        return f"{dotted} in {self.path}"


def load_settings(
    environ: Mapping[str, str] | None = None, cwd: str | Path | None = None
) -> Settings:
    """Read and check the configuration.

    Args:
        environ: The variables (default ``os.environ``).
        cwd: Where ``superbiz.toml`` is looked for (default the working directory).

    Returns:
        The effective settings; with nothing set, no backend is configured.

    Raises:
        ConfigError: For a setting that cannot work, naming it, the value (never a secret's)
            and the fix.
    """
    env = dict(os.environ if environ is None else environ)
    base = Path(cwd) if cwd is not None else Path.cwd()
    path = _config_path(env, base)
    document = _read_file(path) if path is not None else {}
    origin = _Origin(path)
    origins: dict[str, str] = {}
    if path is not None:
        origins[CONFIG_VARIABLE] = (
            "environment" if env.get(CONFIG_VARIABLE, "").strip() else "working directory"
        )
    _refuse_unknown(env, document, path)

    def pick(backend: str | None, key: str, table: Mapping[str, Any]) -> tuple[Any, bool]:
        variable = variable_name(backend, key)
        value = env.get(variable)
        if value is not None and value.strip() != "":
            origins[variable] = "environment"
            return value, True
        if key in table:
            origins[variable] = str(path)
            return table[key], False
        return None, False

    timeout_raw, timeout_env = pick(None, "query_timeout_s", document)
    timeout = DEFAULT_QUERY_TIMEOUT_S
    if timeout_raw is not None:
        timeout = _timeout(timeout_raw, origin.name(None, "query_timeout_s", timeout_env))
    labels_raw, labels_env = pick(None, "service_label", document)
    labels = DEFAULT_SERVICE_LABELS
    if labels_raw is not None:
        labels = _labels(labels_raw, origin.name(None, "service_label", labels_env))
    files_raw, files_env = pick(None, "log_files", document)
    log_files: tuple[tuple[str, str], ...] = ()
    if files_raw is not None:
        log_files = _log_files(files_raw, origin.name(None, "log_files", files_env), base)
    runbooks_raw, runbooks_env = pick(None, "runbooks", document)
    runbooks: tuple[str, ...] = ()
    if runbooks_raw is not None:
        runbooks = _runbooks(runbooks_raw, origin.name(None, "runbooks", runbooks_env), base)

    backends: dict[str, BackendSettings] = {}
    for name, options in BACKEND_SPECS.items():
        table = document.get(name, {})
        values: dict[str, tuple[Any, bool]] = {}
        for key in (*CONNECTION_KEYS, *options):
            value, from_env = pick(name, key, table)
            if value is not None:
                values[key] = (value, from_env)
        if not values:
            continue
        if "url" not in values:
            given = origin.name(name, next(iter(values)), values[next(iter(values))][1])
            raise ConfigError(
                f"{given} is set but {variable_name(name, 'url')} is not: set the "
                f"{name} URL, or remove the other {name} settings"
            )
        backends[name] = _backend(name, values, options, origin)
    sources = [
        name for name in LOG_SOURCES if name in backends or (name == "log_files" and log_files)
    ]
    if len(sources) > 1:
        named = [_setting_name(name, origins, path) for name in sources]
        raise ConfigError(
            f"{' and '.join(named)} are both set: at most one log source (Loki, OpenSearch or "
            "local log files) can serve query_logs; unset all but one"
        )
    return Settings(
        backends=backends,
        service_labels=labels,
        query_timeout_s=timeout,
        config_file=str(path) if path is not None else None,
        origins=origins,
        log_files=log_files,
        runbooks=runbooks,
    )


def _setting_name(source: str, origins: Mapping[str, str], path: Path | None) -> str:
    """How a log source is named in a message: its variable, or its key in the file."""
    variable = (
        variable_name(None, "log_files") if source == "log_files" else variable_name(source, "url")
    )
    if origins.get(variable, "environment") == "environment" or path is None:
        return variable
    key = "log_files" if source == "log_files" else f"{source}.url"
    return f"{key} in {path}"


def _log_files(value: object, where: str, base: Path) -> tuple[tuple[str, str], ...]:
    """``service=glob;...`` (or a TOML table service -> glob or [globs]) as ``(service, glob)``."""
    pairs: list[tuple[str, str]] = []
    example = "e.g. postgres=/var/log/postgresql/*.log;api=/srv/api/*.jsonl"
    if isinstance(value, dict):
        for service, globs in value.items():
            listed = json_shape.strings(_parts(globs))
            if listed is None:
                raise ConfigError(f"{where}: {service} must name a glob or a list of globs")
            pairs += [(str(service).strip(), item.strip()) for item in listed]
    elif isinstance(value, str):
        for part in value.split(";"):
            if not part.strip():
                continue
            service, sep, pattern = part.partition("=")
            if not sep:
                raise ConfigError(
                    f"{where}: {part.strip()!r} is not service=glob; write service=glob pairs "
                    f"separated by ; ({example})"
                )
            pairs.append((service.strip(), pattern.strip()))
    else:
        raise ConfigError(f"{where} must be service=glob pairs separated by ; ({example})")
    checked: list[tuple[str, str]] = []
    for service, pattern in pairs:
        if not service or any(ch.isspace() for ch in service):
            raise ConfigError(f"{where}: service name {service!r} must be one word ({example})")
        if not pattern:
            raise ConfigError(f"{where}: {service}= names no file ({example})")
        path = Path(pattern).expanduser()
        checked.append((service, str(path if path.is_absolute() else base / path)))
    if not checked:
        raise ConfigError(f"{where} names no file ({example})")
    return tuple(checked)


def _parts(value: object, separator: str | None = None) -> list[object] | None:
    """The items of a list setting, None when it is neither a text nor a TOML array.

    A text is split at ``separator`` (it is one item when there is none).
    """
    if isinstance(value, str):
        return list(value.split(separator)) if separator is not None else [value]
    return list(value) if isinstance(value, list) else None


def _runbooks(value: object, where: str, base: Path) -> tuple[str, ...]:
    """Folders separated by ``;`` (or a TOML array), each an existing directory."""
    listed = json_shape.strings(_parts(value, ";"))
    if listed is None:
        raise ConfigError(f"{where} must be folders separated by ; (or a TOML array of folders)")
    items = [part.strip() for part in listed]
    folders: list[str] = []
    for item in items:
        if not item:
            continue
        path = Path(item).expanduser()
        path = path if path.is_absolute() else base / path
        if not path.is_dir():
            raise ConfigError(
                f"{where}: {item} is not a folder; name folders of Markdown runbooks separated by ;"
            )
        folders.append(str(path.resolve()))
    if not folders:
        raise ConfigError(f"{where} names no folder")
    return tuple(dict.fromkeys(folders))


def _refuse_unknown(env: Mapping[str, str], document: Mapping[str, Any], path: Path | None) -> None:
    """A misspelt backend variable or file key is an error, never silently ignored."""
    for name, options in BACKEND_SPECS.items():
        known = {variable_name(name, key) for key in (*CONNECTION_KEYS, *options)}
        prefix = variable_name(name, "")
        for variable in sorted(env):
            if variable.startswith(prefix) and variable not in known:
                raise ConfigError(
                    f"unknown setting {variable}; {name} settings are " + ", ".join(sorted(known))
                )
    for key, value in document.items():
        if key in BACKEND_SPECS:
            if not isinstance(value, dict):
                raise ConfigError(f"{key} in {path} must be a table ([{key}])")
            allowed = (*CONNECTION_KEYS, *BACKEND_SPECS[key])
            for inner in value:
                if inner not in allowed:
                    raise ConfigError(
                        f"unknown key {key}.{inner} in {path}; [{key}] takes " + ", ".join(allowed)
                    )
        elif key not in TOP_LEVEL_HELP or key == "config":
            raise ConfigError(
                f"unknown key {key} in {path}; top-level keys are query_timeout_s, "
                "service_label, log_files, runbooks, and the tables "
                + ", ".join(f"[{n}]" for n in BACKEND_SPECS)
            )


def _timeout(value: object, where: str) -> float:
    try:
        given = json_shape.scalar_text(value)
        number = float(given) if given is not None else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number) or not 0 < number <= 600:
        raise ConfigError(f"{where}={value!r} must be a number of seconds above 0, at most 600")
    return number


def _labels(value: object, where: str) -> tuple[str, ...]:
    parts = _parts(value, ",")
    if parts is None:
        raise ConfigError(f"{where} must be comma-separated label names, e.g. service,job,app")
    items = [str(part).strip() for part in parts]
    labels = tuple(item for item in items if item)
    bad = [item for item in labels if not _LABEL.fullmatch(item)]
    if not labels or bad:
        raise ConfigError(
            f"{where}={value!r} must be comma-separated label names (letters, digits, _), "
            "e.g. service,job,app"
        )
    return labels


def _backend(
    name: str,
    values: Mapping[str, tuple[Any, bool]],
    options: Mapping[str, OptionSpec],
    origin: _Origin,
) -> BackendSettings:
    connection = {k: v for k, (v, _) in values.items() if k in CONNECTION_KEYS}
    try:
        checked = _Connection.model_validate(connection)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        key = str(error["loc"][0]) if error["loc"] else "url"
        problem = _TYPE_ERRORS.get(error["type"], error["msg"])
        raise ConfigError(_message(name, key, values, origin, problem)) from None
    extras: dict[str, Any] = {}
    for key, spec in options.items():
        if key not in values:
            extras[key] = spec.default
            continue
        try:
            extras[key] = spec.check(values[key][0])
        except ValueError as exc:
            raise ConfigError(_message(name, key, values, origin, str(exc))) from None
    if (checked.user is None) != (checked.password is None):
        missing = "password" if checked.password is None else "user"
        raise ConfigError(
            f"basic auth for {name} needs both {variable_name(name, 'user')} and "
            f"{variable_name(name, 'password')}: set {variable_name(name, missing)} too"
        )
    if checked.token is not None and checked.user is not None:
        raise ConfigError(
            f"{variable_name(name, 'token')} and {variable_name(name, 'user')} are both set for "
            f"{name}: use a bearer token or basic auth, not both"
        )
    if checked.ca_file is not None and not Path(checked.ca_file).expanduser().is_file():
        where = origin.name(name, "ca_file", values["ca_file"][1])
        raise ConfigError(f"{where}={checked.ca_file}: no such file; give a PEM CA bundle")
    return BackendSettings(
        name=name,
        url=checked.url,
        token=checked.token,
        user=checked.user,
        password=checked.password,
        headers=dict(checked.headers),
        ca_file=str(Path(checked.ca_file).expanduser()) if checked.ca_file else None,
        insecure=checked.insecure,
        options=extras,
    )


def _message(
    name: str, key: str, values: Mapping[str, tuple[Any, bool]], origin: _Origin, problem: str
) -> str:
    """``<where>=<value> <problem>``; a secret's value (and any header) is never shown."""
    problem = problem.removeprefix("Value error, ")
    raw, from_env = values.get(key, (None, True))
    where = origin.name(name, key, from_env)
    if key in SECRET_KEYS or key == "headers" or key == "url":
        shown = "" if key != "url" or "@" in str(raw) else f"={raw}"
        return f"{where}{shown} {problem}"
    return f"{where}={raw!r} {problem}"


# --------------------------------------------------------------------------- presentation


def masked_headers(headers: Mapping[str, str]) -> str:
    """Header names with their values masked, as JSON."""
    return json.dumps({name: MASK for name in headers}, ensure_ascii=False)


def describe(settings: Settings) -> list[tuple[str, str, str]]:
    """The effective settings as ``(variable, shown value, origin)``, secrets masked.

    Unset backend keys are left out; the top-level settings are always shown (with their
    defaults).
    """
    rows: list[tuple[str, str, str]] = []
    config = settings.config_file or f"(none: no {CONFIG_VARIABLE}, no ./{DEFAULT_FILE})"

    def origin(variable: str) -> str:
        return settings.origins.get(variable, "default")

    rows.append((CONFIG_VARIABLE, config, origin(CONFIG_VARIABLE)))

    timeout = variable_name(None, "query_timeout_s")
    rows.append((timeout, f"{settings.query_timeout_s:g}", origin(timeout)))
    label = variable_name(None, "service_label")
    rows.append((label, ",".join(settings.service_labels), origin(label)))
    files = variable_name(None, "log_files")
    if settings.log_files:
        shown_files = ";".join(f"{service}={glob}" for service, glob in settings.log_files)
        rows.append((files, shown_files, origin(files)))
    runbooks = variable_name(None, "runbooks")
    if settings.runbooks:
        rows.append((runbooks, ";".join(settings.runbooks), origin(runbooks)))
    for name in BACKEND_SPECS:
        backend = settings.backend(name)
        if backend is None:
            rows.append(
                (variable_name(name, "url"), "(not set)", "default"),
            )
            continue
        shown: dict[str, str | None] = {
            "url": backend.url,
            "token": MASK if backend.token else None,
            "user": backend.user,
            "password": MASK if backend.password else None,
            "headers": masked_headers(backend.headers) if backend.headers else None,
            "ca_file": backend.ca_file,
            "insecure": "true" if backend.insecure else None,
        }
        for key, spec in BACKEND_SPECS[name].items():
            value = backend.options.get(key)
            if value is None:
                continue
            shown[key] = MASK if spec.secret else spec.show(value)
        for key, text in shown.items():
            if text is not None:
                variable = variable_name(name, key)
                rows.append((variable, text, origin(variable)))
    return rows


def redact(text: str, secrets: list[str]) -> str:
    """``text`` with every secret value replaced by ``****`` (a last line of defence)."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, MASK)
    return text
