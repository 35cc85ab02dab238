"""The evidence sources' settings: one declaration each, read through ``state.configuration``.

Every setting has a variable (``SUPERBIZ_PROMETHEUS_URL``) and the same key in the TOML file
(``url`` in the ``[prometheus]`` table; top-level settings such as ``query_timeout_s`` at the top).
The file is ``SUPERBIZ_CONFIG`` when set, else ``superbiz.toml`` in the working directory when it
exists; a variable wins over the file. Values are checked here into plain frozen records
(``Settings``, ``BackendSettings``); nothing behind this module reads the configuration.

A backend is declared by one ``Backend`` line: its name, what it serves and the keys of its own
(``Key``: a check, a default, a description). Each backend also takes the same connection keys
(``CONNECTION``): ``url``, ``token`` (bearer), ``user`` / ``password`` (basic), ``headers`` (a
JSON object, or a TOML table), ``ca_file`` / ``insecure`` (TLS). Its ``Setting`` declarations
(variable, file key, secret or not) follow from those. A backend is configured when its ``url``
is set. Secrets (token, password, header values) never appear in a message, a ``repr`` or
``describe``: errors name the variable or key, never a secret's value.

Three sources are no HTTP backends: local log files (``SUPERBIZ_LOG_FILES``, ``service=glob``
pairs separated by ``;``), runbook folders (``SUPERBIZ_RUNBOOKS``, folders separated by ``;``) and
OTLP trace files (``SUPERBIZ_TRACE_FILES``, globs separated by ``;``). At most one log source
(Loki, OpenSearch, log files) and one trace source (Tempo, Jaeger, trace files) may be
configured.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from evidence.mcp.settings import (
    McpServerSettings,
    McpSettingsError,
    parse_servers,
    shown_servers,
)
from state import json_shape
from state.configuration import CONFIG_VARIABLE, DEFAULT_FILE, Sources
from state.settings import (
    FALSE_WORDS,
    MASK,
    TRUE_WORDS,
    Check,
    Given,
    Setting,
    SettingsError,
    Text,
)

PREFIX = "SUPERBIZ_"
DEFAULT_SERVICE_LABELS: tuple[str, ...] = ("service", "job", "app")
DEFAULT_QUERY_TIMEOUT_S = 20.0
DEFAULT_OPENSEARCH_INDEX = "logs-*"
DEFAULT_OPENSEARCH_FIELDS: dict[str, str] = {
    "timestamp": "@timestamp",
    "level": "level",
    "service": "service",
    "instance": "host",
    "message": "message",
}
"""The document field of each role, unless ``SUPERBIZ_OPENSEARCH_FIELDS`` names another."""

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
    """The backend's own keys (``Backend.keys``), validated, defaults filled."""

    def variable(self, key: str) -> str:
        """The environment variable of one of this backend's keys."""
        return variable_name(self.name, key)

    def secrets(self) -> list[str]:
        """Every secret value of this backend (for redaction), longest first."""
        values = [self.token, self.password, *self.headers.values()]
        return sorted({v for v in values if v}, key=len, reverse=True)

    def value(self, key: str) -> object:
        """The checked value of one of its keys (a connection key or one of its own)."""
        return getattr(self, key) if key in CONNECTION_KEYS else self.options.get(key)


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
    trace_files: tuple[str, ...] = ()
    """Globs of OTLP JSON trace files (absolute), in the order given."""
    mcp_servers: tuple[McpServerSettings, ...] = ()
    """MCP servers whose tools are offered as evidence tools (``evidence/mcp``)."""

    def backend(self, name: str) -> BackendSettings | None:
        """One configured backend, or None."""
        return self.backends.get(name)

    @property
    def real(self) -> bool:
        """Whether any real source is configured (else the bundled sample is used)."""
        return bool(
            self.backends or self.log_files or self.runbooks or self.trace_files or self.mcp_servers
        )

    @property
    def trace_source(self) -> str | None:
        """The configured trace source (``tempo``, ``jaeger``, ``trace_files``), or None."""
        if self.trace_files:
            return "trace_files"
        return next((name for name in trace_sources() if name in self.backends), None)

    @property
    def log_source(self) -> str | None:
        """The configured log source (``loki``, ``opensearch``, ``log_files``), or None."""
        if self.log_files:
            return "log_files"
        return next((name for name in log_sources() if name in self.backends), None)

    def secrets(self) -> list[str]:
        """Every secret value of every backend, longest first."""
        found = {s for b in self.backends.values() for s in b.secrets()}
        found.update(s for server in self.mcp_servers for s in server.secrets())
        return sorted(found, key=len, reverse=True)


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


def _url(value: object) -> str:
    text = json_shape.text(value)
    if text is None:
        raise ValueError("must be a URL, e.g. http://127.0.0.1:9090")
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise ValueError("is not a valid URL; expected e.g. http://127.0.0.1:9090") from None
    if parts.password is not None:
        raise ValueError("must not carry a password; put the credentials in _USER and _PASSWORD")
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host")
    return text.rstrip("/")


def _string(value: object) -> str | None:
    """A text, stripped (None when blank)."""
    if not isinstance(value, str):
        raise ValueError("must be a string")
    return value.strip() or None


def _headers(value: object) -> dict[str, str]:
    data = _json_object(value)
    headers: dict[str, str] = {}
    for name, item in data.items():
        if not re.fullmatch(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+", str(name)):
            raise ValueError(f"has an invalid header name {name!r}")
        if not isinstance(item, str):
            raise ValueError(f"header {name!r} must have a string value")
        headers[str(name)] = item
    return headers


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


def masked_headers(headers: Mapping[str, str]) -> str:
    """Header names with their values masked, as JSON."""
    return json.dumps({name: MASK for name in headers}, ensure_ascii=False)


Reveal = Literal["value", "url", "nothing"]


@dataclass(frozen=True)
class KeyCheck(Check):
    """A backend key's rule and its message, never with a secret's value.

    ``rule`` returns the value or raises ``ValueError("must be ...")``; the message is
    ``<variable or key>=<value> <problem>``.
    """

    rule: Callable[[object], Any]
    reveal: Reveal = "value"
    """``value``: shown as written; ``url``: shown unless it has credentials; ``nothing``."""

    def read(self, given: Given) -> object:
        """The checked value.

        Raises:
            ConfigError: ``<where>[=<value>] <problem>``.
        """
        try:
            return self.rule(given.raw)
        except ValueError as exc:
            raise ConfigError(_message(given, self.reveal, str(exc))) from None


def _message(given: Given, reveal: Reveal, problem: str) -> str:
    """``<where>=<value> <problem>``; a secret's value (and any header) is never shown."""
    if reveal == "value":
        return f"{given.label}={given.raw!r} {problem}"
    shown = f"={given.raw}" if reveal == "url" and "@" not in str(given.raw) else ""
    return f"{given.label}{shown} {problem}"


@dataclass(frozen=True)
class SourceCheck(Check):
    """A top-level setting's rule: ``rule(value, where, base)`` raises ``ConfigError``."""

    rule: Callable[[object, str, Path], Any]

    def read(self, given: Given) -> object:
        """The checked value (relative paths read from ``given.folder``)."""
        return self.rule(given.raw, given.label, given.folder)


# --------------------------------------------------------------------------- top-level settings


def _timeout(value: object, where: str, base: Path) -> float:
    try:
        given = json_shape.scalar_text(value)
        number = float(given) if given is not None else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number) or not 0 < number <= 600:
        raise ConfigError(f"{where}={value!r} must be a number of seconds above 0, at most 600")
    return number


def _parts(value: object, separator: str | None = None) -> list[object] | None:
    """The items of a list setting, None when it is neither a text nor a TOML array.

    A text is split at ``separator`` (it is one item when there is none).
    """
    if isinstance(value, str):
        return list(value.split(separator)) if separator is not None else [value]
    return list(value) if isinstance(value, list) else None


def _labels(value: object, where: str, base: Path) -> tuple[str, ...]:
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


def _trace_files(value: object, where: str, base: Path) -> tuple[str, ...]:
    """Globs separated by ``;`` (or a TOML array), relative ones read from ``base``."""
    listed = json_shape.strings(_parts(value, ";"))
    example = "e.g. /var/log/otel/traces*.json*"
    if listed is None:
        raise ConfigError(f"{where} must be globs separated by ; ({example})")
    globs: list[str] = []
    for item in (part.strip() for part in listed):
        if item:
            path = Path(item).expanduser()
            globs.append(str(path if path.is_absolute() else base / path))
    if not globs:
        raise ConfigError(f"{where} names no file ({example})")
    return tuple(dict.fromkeys(globs))


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


def variable_name(backend: str | None, key: str) -> str:
    """``SUPERBIZ_<BACKEND>_<KEY>`` (or ``SUPERBIZ_<KEY>`` for a top-level setting)."""
    middle = f"{backend.upper()}_" if backend else ""
    return f"{PREFIX}{middle}{key.upper()}"


def _top(
    key: str,
    rule: Callable[[object, str, Path], Any],
    description: str,
    default: object,
    show: Callable[[Any], str] | None = None,
    shown_default: str | None = None,
) -> Setting:
    return Setting(
        key,
        variable_name(None, key),
        SourceCheck(rule),
        description,
        default=default,
        toml_key=key,
        show=show,
        shown_default=shown_default,
    )


CONFIG_FILE = Setting(
    "config",
    CONFIG_VARIABLE,
    Text(),
    "TOML file with these settings (default ./superbiz.toml when it exists)",
    shown_default="./superbiz.toml when it exists",
)
QUERY_TIMEOUT_S = _top(
    "query_timeout_s",
    _timeout,
    "seconds one backend request may take (default 20)",
    DEFAULT_QUERY_TIMEOUT_S,
)
SERVICE_LABEL = _top(
    "service_label",
    _labels,
    "labels naming a service, tried in order (default service,job,app)",
    DEFAULT_SERVICE_LABELS,
)
LOG_FILES = _top(
    "log_files",
    _log_files,
    "local log files: service=glob pairs separated by ; "
    "(e.g. postgres=/var/log/postgresql/*.log;api=/srv/api/*.jsonl)",
    (),
    show=lambda pairs: ";".join(f"{service}={glob}" for service, glob in pairs),
)
RUNBOOKS = _top(
    "runbooks",
    _runbooks,
    "folders of Markdown runbooks and postmortems, separated by ;",
    (),
    show=";".join,
)
TRACE_FILES = _top(
    "trace_files",
    _trace_files,
    "OTLP JSON trace files (the OpenTelemetry Collector's file exporter, plain or .gz): "
    "globs separated by ;",
    (),
    show=";".join,
)


def _mcp_servers(value: object, where: str, base: Path) -> tuple[McpServerSettings, ...]:
    try:
        return parse_servers(value)
    except McpSettingsError as exc:
        raise ConfigError(f"{where}: {exc}") from None


MCP_SERVERS = _top(
    "mcp_servers",
    _mcp_servers,
    "MCP servers whose tools are evidence tools: a JSON object (or [mcp_servers.<name>] tables) "
    "of {command, args, env} or {url, headers}, with tools, allow_destructive, timeout_s, "
    "max_lines; env and header values are secret",
    (),
    show=shown_servers,
)
TOP_LEVEL: tuple[Setting, ...] = (
    QUERY_TIMEOUT_S,
    SERVICE_LABEL,
    LOG_FILES,
    RUNBOOKS,
    TRACE_FILES,
    MCP_SERVERS,
)
"""The settings at the top of the file, in the order they are read."""


# --------------------------------------------------------------------------- backends


@dataclass(frozen=True)
class Key:
    """One key of every backend (``CONNECTION``) or of one backend (``Backend.keys``)."""

    name: str
    rule: Callable[[object], Any]
    """Returns the checked value or raises ``ValueError("must be ...")``."""
    description: str
    default: Any = None
    secret: bool = False
    reveal: Reveal = "value"
    show: Callable[[Any], str] | None = None
    """How ``config show`` writes the checked value (default: as text, ``****`` if secret)."""
    shown_default: str | None = None


@dataclass(frozen=True)
class Backend:
    """One HTTP backend: its name, what it serves, and its own keys."""

    name: str
    serves: str
    """What it serves: ``metrics``, ``logs`` (at most one log source is configured), ..."""
    keys: tuple[Key, ...] = ()

    @cached_property
    def settings(self) -> dict[str, Setting]:
        """The declaration of each key by key, the connection keys first.

        Each declaration gives the variable, the file key, the rule and whether it is secret.
        """
        return {
            key.name: Setting(
                f"{self.name}.{key.name}",
                variable_name(self.name, key.name),
                KeyCheck(key.rule, "nothing" if key.secret else key.reveal),
                key.description,
                default=key.default,
                toml_key=f"{self.name}.{key.name}",
                secret=key.secret,
                show=key.show,
                shown_default=key.shown_default,
            )
            for key in (*CONNECTION, *self.keys)
        }


CONNECTION: tuple[Key, ...] = (
    Key("url", _url, "base URL of the API", reveal="url"),
    Key("token", _string, "bearer token", secret=True),
    Key("user", _string, "basic-auth user"),
    Key("password", _string, "basic-auth password", secret=True),
    Key(
        "headers",
        _headers,
        'extra request headers, a JSON object, e.g. {"X-Scope-OrgID": "team-a"}',
        secret=True,
        show=masked_headers,
    ),
    Key("ca_file", _string, "CA bundle (PEM) to verify the server's certificate"),
    Key(
        "insecure",
        _boolean,
        "1 to skip TLS certificate verification",
        default=False,
        show=lambda on: "true" if on else "false",
    ),
)
"""The keys every backend takes, in the order they are checked."""
CONNECTION_KEYS = tuple(key.name for key in CONNECTION)

BACKENDS: tuple[Backend, ...] = (
    Backend(
        "prometheus",
        "metrics",
        (
            Key(
                "max_series",
                _positive_int(1, 100),
                "series returned per query at most (1-100)",
                default=20,
            ),
            Key(
                "standard_queries",
                _string_map,
                "JSON object name -> PromQL template ($label, $service) queried for a service",
                show=_as_json,
                shown_default="error ratio, p99 latency, CPU, memory",
            ),
        ),
    ),
    Backend("alertmanager", "metrics"),
    Backend(
        "loki",
        "logs",
        (
            Key(
                "tenant",
                _tenant,
                "tenant sent as X-Scope-OrgID (a multi-tenant Loki, Grafana Cloud)",
            ),
        ),
    ),
    Backend(
        "tempo",
        "traces",
        (Key("tenant", _tenant, "tenant sent as X-Scope-OrgID (a multi-tenant Tempo)"),),
    ),
    Backend("jaeger", "traces"),
    Backend(
        "opensearch",
        "logs",
        (
            Key(
                "index",
                _index_pattern,
                "index pattern searched (default logs-*)",
                default=DEFAULT_OPENSEARCH_INDEX,
            ),
            Key(
                "fields",
                _log_fields,
                "JSON object naming the document fields: timestamp, level, service, instance, "
                "message (defaults @timestamp, level, service, host, message)",
                default=dict(DEFAULT_OPENSEARCH_FIELDS),
                show=_as_json,
                shown_default=", ".join(DEFAULT_OPENSEARCH_FIELDS.values()),
            ),
        ),
    ),
)
"""The backends this version knows. A new one is one entry here (its own keys with their rules)
and its client in ``evidence/composed.py``; its variables, file keys, messages and
``config show`` rows follow."""


def backend(name: str) -> Backend:
    """The declared backend of that name."""
    return next(b for b in BACKENDS if b.name == name)


def trace_sources() -> tuple[str, ...]:
    """The trace sources, in the order messages name them; at most one may be configured."""
    return (*(b.name for b in BACKENDS if b.serves == "traces"), "trace_files")


def log_sources() -> tuple[str, ...]:
    """The log sources, in the order messages name them; at most one may be configured."""
    return (*(b.name for b in BACKENDS if b.serves == "logs"), "log_files")


SETTINGS: tuple[Setting, ...] = (
    CONFIG_FILE,
    *TOP_LEVEL,
    *(setting for declared in BACKENDS for setting in declared.settings.values()),
)
"""Every evidence setting, in the order ``config show`` prints them."""


def known_variables() -> list[str]:
    """Every variable this module reads, in documentation order."""
    return [s.variable for s in SETTINGS]


# --------------------------------------------------------------------------- loading


def load_settings(
    environ: Mapping[str, str] | None = None, cwd: str | Path | None = None
) -> Settings:
    """Read and check the configuration.

    Args:
        environ: The variables (default: the process's, through ``state.configuration``).
        cwd: Where ``superbiz.toml`` is looked for (default the working directory).

    Returns:
        The effective settings; with nothing set, no backend is configured.

    Raises:
        ConfigError: For a setting that cannot work, naming it, the value (never a secret's)
            and the fix.
    """
    sources = Sources(environ, cwd)
    try:
        path, document = sources.document()
    except SettingsError as exc:
        raise ConfigError(str(exc)) from None
    origins: dict[str, str] = {}
    if path is not None:
        origins[CONFIG_VARIABLE] = sources.config_origin
    _refuse_unknown(sources, document, path)

    def given(setting: Setting) -> Given | None:
        found = sources.given(setting)
        if found is not None:
            origins[setting.variable] = found.origin
        return found

    top: dict[str, Any] = {}
    for setting in TOP_LEVEL:
        found = given(setting)
        top[setting.name] = setting.default if found is None else setting.read(found)

    backends: dict[str, BackendSettings] = {}
    for declared in BACKENDS:
        values: dict[str, Given] = {}
        for key, setting in declared.settings.items():
            found = given(setting)
            if found is not None:
                values[key] = found
        if not values:
            continue
        if "url" not in values:
            first = next(iter(values.values()))
            url = variable_name(declared.name, "url")
            raise ConfigError(
                f"{first.label} is set but {url} is not: set the {declared.name} URL, or remove "
                f"the other {declared.name} settings"
            )
        backends[declared.name] = _backend(declared, values)
    log_files: tuple[tuple[str, str], ...] = top[LOG_FILES.name]
    sources_of_logs = [
        name for name in log_sources() if name in backends or (name == "log_files" and log_files)
    ]
    if len(sources_of_logs) > 1:
        named = [_setting_name(name, origins, path) for name in sources_of_logs]
        raise ConfigError(
            f"{' and '.join(named)} are both set: at most one log source (Loki, OpenSearch or "
            "local log files) can serve query_logs; unset all but one"
        )
    trace_files: tuple[str, ...] = top[TRACE_FILES.name]
    sources_of_traces = [
        name
        for name in trace_sources()
        if name in backends or (name == "trace_files" and trace_files)
    ]
    if len(sources_of_traces) > 1:
        named = [_setting_name(name, origins, path) for name in sources_of_traces]
        raise ConfigError(
            f"{' and '.join(named)} are both set: at most one trace source (Tempo, Jaeger or "
            "OTLP trace files) can serve query_traces; unset all but one"
        )
    return Settings(
        backends=backends,
        service_labels=top[SERVICE_LABEL.name],
        query_timeout_s=top[QUERY_TIMEOUT_S.name],
        config_file=str(path) if path is not None else None,
        origins=origins,
        log_files=log_files,
        runbooks=top[RUNBOOKS.name],
        trace_files=trace_files,
        mcp_servers=top[MCP_SERVERS.name],
    )


def _setting_name(source: str, origins: Mapping[str, str], path: Path | None) -> str:
    """How a log source is named in a message: its variable, or its key in the file."""
    if source in ("log_files", "trace_files"):
        setting = LOG_FILES if source == "log_files" else TRACE_FILES
    else:
        setting = backend(source).settings["url"]
    variable = setting.variable
    if origins.get(variable, "environment") == "environment" or path is None:
        return variable
    return f"{setting.toml_key} in {path}"


def _refuse_unknown(sources: Sources, document: Mapping[str, Any], path: Path | None) -> None:
    """A misspelt backend variable or file key is an error, never silently ignored."""
    tables = {declared.name: declared.settings for declared in BACKENDS}
    for name, keys in tables.items():
        known = {setting.variable for setting in keys.values()}
        for variable in sources.variables(variable_name(name, "")):
            if variable not in known:
                raise ConfigError(
                    f"unknown setting {variable}; {name} settings are " + ", ".join(sorted(known))
                )
    top_keys = [s.toml_key for s in TOP_LEVEL if s.toml_key]
    for key, value in document.items():
        if key in tables:
            if not isinstance(value, dict):
                raise ConfigError(f"{key} in {path} must be a table ([{key}])")
            allowed = tuple(tables[key])
            for inner in value:
                if inner not in allowed:
                    raise ConfigError(
                        f"unknown key {key}.{inner} in {path}; [{key}] takes " + ", ".join(allowed)
                    )
        elif key not in top_keys:
            raise ConfigError(
                f"unknown key {key} in {path}; top-level keys are "
                + ", ".join(top_keys)
                + ", and the tables "
                + ", ".join(f"[{n}]" for n in tables)
            )


def _backend(declared: Backend, values: Mapping[str, Given]) -> BackendSettings:
    """One backend's checked settings: each key by its rule, then the rules between keys."""
    name = declared.name
    checked: dict[str, Any] = {}
    for key, setting in declared.settings.items():
        found = values.get(key)
        checked[key] = setting.default if found is None else setting.read(found)
    user, password, token = checked["user"], checked["password"], checked["token"]
    if (user is None) != (password is None):
        missing = "password" if password is None else "user"
        raise ConfigError(
            f"basic auth for {name} needs both {variable_name(name, 'user')} and "
            f"{variable_name(name, 'password')}: set {variable_name(name, missing)} too"
        )
    if token is not None and user is not None:
        raise ConfigError(
            f"{variable_name(name, 'token')} and {variable_name(name, 'user')} are both set for "
            f"{name}: use a bearer token or basic auth, not both"
        )
    ca_file = checked["ca_file"]
    if ca_file is not None and not Path(ca_file).expanduser().is_file():
        where = values["ca_file"].label
        raise ConfigError(f"{where}={ca_file}: no such file; give a PEM CA bundle")
    return BackendSettings(
        name=name,
        url=checked["url"],
        token=token,
        user=user,
        password=password,
        headers=dict(checked["headers"] or {}),
        ca_file=str(Path(ca_file).expanduser()) if ca_file else None,
        insecure=bool(checked["insecure"]),
        options={key.name: checked[key.name] for key in declared.keys},
    )


# --------------------------------------------------------------------------- presentation


def _shown(value: object) -> bool:
    """Whether ``describe`` lists a value (unset, empty and off are left out)."""
    return value is not None and value is not False and value != {} and value != ()


def describe(settings: Settings) -> list[tuple[str, str, str]]:
    """The effective settings as ``(variable, shown value, origin)``, secrets masked.

    Unset backend keys are left out; the top-level settings are shown with their defaults
    (log files and runbooks only when set).
    """
    rows: list[tuple[str, str, str]] = []
    config = settings.config_file or f"(none: no {CONFIG_VARIABLE}, no ./{DEFAULT_FILE})"

    def origin(variable: str) -> str:
        return settings.origins.get(variable, "default")

    rows.append((CONFIG_VARIABLE, config, origin(CONFIG_VARIABLE)))
    values = {
        QUERY_TIMEOUT_S.name: settings.query_timeout_s,
        SERVICE_LABEL.name: settings.service_labels,
        LOG_FILES.name: settings.log_files,
        TRACE_FILES.name: settings.trace_files,
        RUNBOOKS.name: settings.runbooks,
        MCP_SERVERS.name: settings.mcp_servers,
    }
    for setting in TOP_LEVEL:
        value = values[setting.name]
        if _shown(value):
            rows.append((setting.variable, setting.shown(value), origin(setting.variable)))
    for declared in BACKENDS:
        configured = settings.backend(declared.name)
        if configured is None:
            rows.append((variable_name(declared.name, "url"), "(not set)", "default"))
            continue
        for key, setting in declared.settings.items():
            value = configured.value(key)
            if _shown(value):
                rows.append((setting.variable, setting.shown(value), origin(setting.variable)))
    return rows


def redact(text: str, secrets: list[str]) -> str:
    """``text`` with every secret value replaced by ``****`` (a last line of defence)."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, MASK)
    return text
