"""Where settings come from: the environment and the configuration file, read here only.

Every other module asks this one (``value``, ``Sources``) and never reads ``os.environ``
itself; ``tests/test_settings_catalog.py`` fails when one does. A setting given by its variable
wins over its key in the file; a variable set to blank text is unset. The file is the one
``SUPERBIZ_CONFIG`` names, else ``superbiz.toml`` in the working directory when it exists; it is
read only when a setting with a file key is asked for, so a broken file never stops a command
that needs none of them.

``Sources()`` sees the process's environment as it is now (tests change it with
``monkeypatch``); ``Sources(environ, cwd)`` reads a given mapping and folder instead.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from state.settings import MASK, Derived, Given, Setting, SettingsError

CONFIG_VARIABLE = "SUPERBIZ_CONFIG"
DEFAULT_FILE = "superbiz.toml"

OTHER_VARIABLES: dict[str, str] = {
    "XDG_DATA_HOME": "the user data folder, where the default SQLite database lives",
}
"""Variables read here that are not settings of this program, with what they are used for."""


class Sources:
    """The environment and the configuration file, as one process (or a test) sees them."""

    def __init__(
        self, environ: Mapping[str, str] | None = None, cwd: str | Path | None = None
    ) -> None:
        self._environ = environ
        self._cwd = Path(cwd) if cwd is not None else None
        self._file: tuple[Path | None, dict[str, Any]] | None = None

    @property
    def cwd(self) -> Path:
        """The folder the file is looked for in and relative paths are read from.

        The working directory is asked for only when needed: the LangGraph server refuses
        ``os.getcwd`` on its event loop, where the database setting is read.
        """
        return self._cwd if self._cwd is not None else Path.cwd()

    @property
    def environ(self) -> Mapping[str, str]:
        """The variables (the process's, live, unless a mapping was given)."""
        return os.environ if self._environ is None else self._environ

    def text(self, variable: str) -> str | None:
        """A variable's text as set, or None when it is unset or blank."""
        raw = self.environ.get(variable)
        return raw if raw is not None and raw.strip() else None

    def variables(self, prefix: str) -> list[str]:
        """The names of the variables that start with ``prefix``, sorted."""
        return sorted(name for name in self.environ if name.startswith(prefix))

    # ------------------------------------------------------------------ the file

    @property
    def config_path(self) -> Path | None:
        """The configuration file, or None when there is none.

        Raises:
            SettingsError: when ``SUPERBIZ_CONFIG`` names a file that does not exist.
        """
        named = (self.text(CONFIG_VARIABLE) or "").strip()
        if named:
            path = Path(named).expanduser()
            path = path if path.is_absolute() else self.cwd / path
            if not path.is_file():
                raise SettingsError(
                    [
                        f"{CONFIG_VARIABLE}={named}: no such file; create it or unset "
                        f"{CONFIG_VARIABLE}"
                    ]
                )
            return path
        default = self.cwd / DEFAULT_FILE
        return default if default.is_file() else None

    @property
    def config_origin(self) -> str:
        """Where the file came from: ``environment``, ``working directory`` or ``default``."""
        if self.text(CONFIG_VARIABLE):
            return "environment"
        return "working directory" if (self.cwd / DEFAULT_FILE).is_file() else "default"

    def document(self) -> tuple[Path | None, dict[str, Any]]:
        """The configuration file and its contents (empty without a file), read once.

        Raises:
            SettingsError: when the file cannot be read or is not valid TOML.
        """
        if self._file is None:
            path = self.config_path
            self._file = (path, _read_file(path) if path is not None else {})
        return self._file

    # ------------------------------------------------------------------ values

    def given(self, setting: Setting) -> Given | None:
        """What sets ``setting``: its variable, else its key in the file; None when neither.

        Raises:
            SettingsError: when the file is needed and cannot be read.
        """
        raw = self.text(setting.variable)
        if raw is not None:
            return Given(raw, setting.variable, "environment", True, self._cwd)
        if setting.toml_key is None:
            return None
        path, document = self.document()
        found, value = _lookup(document, setting.toml_key)
        if not found or path is None:
            return None
        return Given(value, f"{setting.toml_key} in {path}", str(path), False, self._cwd)

    def default(self, setting: Setting) -> object:
        """The value of ``setting`` when nothing sets it."""
        if isinstance(setting.default, Derived):
            return setting.default.rule(self)
        return setting.default

    def value(self, setting: Setting) -> Any:
        """The checked value of ``setting``, or its default.

        Raises:
            ValueError: a ``SettingsError`` (or the area's configuration error) naming the
                variable or the key, the value and what is allowed.
        """
        given = self.given(setting)
        return self.default(setting) if given is None else setting.read(given)

    def origin(self, setting: Setting) -> str:
        """Where the value of ``setting`` comes from: ``environment``, the file, ``default``."""
        try:
            given = self.given(setting)
        except SettingsError:
            given = None
        return "default" if given is None else given.origin


def _lookup(document: Mapping[str, Any], key: str) -> tuple[bool, object]:
    """The value at a dotted key (``prometheus.url``) of the file, and whether it is there."""
    current: object = document
    for part in key.split("."):
        if not isinstance(current, Mapping) or part not in current:
            return False, None
        current = current[part]
    return True, current


def _read_file(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except OSError as exc:
        raise SettingsError(
            [f"cannot read the configuration file {path}: {exc.strerror}"]
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError([f"{path} is not valid TOML: {exc}"]) from None


def describe(
    settings: Iterable[Setting], sources: Sources | None = None
) -> tuple[list[tuple[str, str, str]], list[str]]:
    """Each setting's effective value as ``(variable, shown value, origin)``, and the problems.

    A secret is shown as ``****``; an unset setting as ``(not set)``, with its default when the
    README states one in words. A value its rule refuses is shown as given (a secret masked) and
    its message is added to the problems.
    """
    sources = sources or Sources()
    rows: list[tuple[str, str, str]] = []
    problems: list[str] = []
    for setting in settings:
        try:
            given = sources.given(setting)
            checked = sources.default(setting) if given is None else setting.read(given)
        except ValueError as exc:
            problems.append(str(exc))
            raw = sources.text(setting.variable) or ""
            shown = MASK if setting.secret else raw
            rows.append((setting.variable, f"{shown} (invalid)", "environment"))
            continue
        origin = "default" if given is None else given.origin
        if checked is None or checked == ():
            extra = f": {setting.shown_default}" if setting.shown_default else ""
            rows.append((setting.variable, f"(not set{extra})", origin))
        else:
            rows.append((setting.variable, setting.shown(checked), origin))
    return rows, problems


def value(setting: Setting, environ: Mapping[str, str] | None = None) -> Any:
    """The checked value of ``setting`` in this process (or in ``environ``), or its default.

    Raises:
        ValueError: naming the variable, the value and what is allowed.
    """
    return Sources(environ).value(setting)


def other_variable(name: str) -> str | None:
    """A variable that is not a setting (``OTHER_VARIABLES``), or None when unset or blank."""
    if name not in OTHER_VARIABLES:
        raise KeyError(f"{name} is not listed in OTHER_VARIABLES")
    return Sources().text(name)


def hand_down(setting: Setting, text: str) -> None:
    """Set ``setting``'s variable in this process, for the worker processes it starts."""
    os.environ[setting.variable] = text
