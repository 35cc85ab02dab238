"""Settings: one declaration each, and the rules that check a value wherever it enters.

A ``Setting`` declares everything about one setting: its name, environment variable, key in the
configuration file, default, description, whether it is a secret, whether it is a run setting
(a ``Context`` field a caller may pass for one run) and its ``Check``, the rule a value must
follow. The declarations live in three places, each beside what it configures: the run settings
are the fields of ``Context`` (``state/context.py``), the program's other settings are
``state/catalog.py``, and the evidence sources' are ``evidence/config.py``. Values are read by
``state/configuration.py`` only (the environment and ``superbiz.toml``); the README's settings
tables are checked against the declarations (``tests/test_settings_catalog.py``).

Every entry (an environment variable, a command-line option, a key in the file, an HTTP API
request body, the LangGraph run context or config) reads a value through its setting's check,
so a wrong value gets the same message everywhere: what set it (the variable, option or key),
the value, and what is allowed. Unknown run-setting keys are reported, with the closest name.
"""

from __future__ import annotations

import difflib
import json
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from state import json_shape

if TYPE_CHECKING:
    from state.configuration import Sources

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")
MASK = "****"
"""How a secret's value is shown."""


class SettingsError(ValueError):
    """One or more settings are invalid; ``problems`` holds one sentence per setting."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


# --------------------------------------------------------------------------- given values


@dataclass(frozen=True)
class Given:
    """One value as it entered, with what set it."""

    raw: object
    label: str
    """How a message names what set it: the variable, the option, ``key in FILE``, the key."""
    origin: str = "environment"
    """Where it came from: ``environment``, the configuration file's path, or a caller."""
    as_text: bool = True
    """Text to be parsed (a variable, an option word), else a typed value (a file's value, a
    request body, a run context)."""
    base: Path | None = None
    """The folder relative paths are read from (None: the working directory)."""

    @property
    def folder(self) -> Path:
        """The folder relative paths are read from."""
        return self.base if self.base is not None else Path.cwd()


class Check(ABC):
    """What one setting accepts: reads a given value into a typed one, or raises naming it."""

    @abstractmethod
    def read(self, given: Given) -> object:
        """The typed value of ``given``.

        Raises:
            ValueError: a ``SettingsError`` (or the area's own configuration error) whose
                message names ``given.label``, the value (never a secret's) and what is allowed.
        """


# --------------------------------------------------------------------------- run settings

Kind = Literal["text", "optional_text", "flag", "choice", "count", "seconds"]


def _show(value: object) -> str:
    """A value as a message shows it.

    Null, true and false as JSON writes them; text and numbers as Python does; anything else by
    its type.
    """
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, str) or json_shape.is_number(value):
        return repr(value)
    return f"a {type(value).__name__}"


class _Invalid(Exception):
    pass


@dataclass(frozen=True)
class RunCheck(Check):
    """The rule of a run setting: one of a few kinds, one message (``problem``)."""

    kind: Kind
    choices: tuple[str, ...] = ()
    minimum: int = 0
    """Smallest allowed ``count``."""
    zero_means: str = ""
    """For a ``count`` whose minimum is 0: what 0 means (e.g. no limit)."""

    @property
    def allowed(self) -> str:
        """What the rule allows, as the end of the sentence "... it must be ..."."""
        if self.kind == "choice":
            return " or ".join(repr(choice) for choice in self.choices)
        if self.kind == "flag":
            return "true or false (" + "/".join(TRUE_WORDS) + " or " + "/".join(FALSE_WORDS) + ")"
        if self.kind == "count":
            extra = f" (0: {self.zero_means})" if self.zero_means else ""
            return f"a whole number of at least {self.minimum}{extra}"
        if self.kind == "seconds":
            return "a number of seconds greater than 0"
        if self.kind == "optional_text":
            return "a non-empty model name, or nothing for the default"
        return "a non-empty text"

    def read(self, given: Given) -> object:
        """The typed value; text is parsed, a typed value is checked as it is."""
        try:
            if given.as_text and isinstance(given.raw, str):
                return self._parse(given.raw)
            return self._check(given.raw)
        except _Invalid:
            raise SettingsError([problem(given.label, given.raw, self)]) from None

    def _check(self, value: object) -> object:
        if self.kind in ("text", "optional_text"):
            if self.kind == "optional_text" and value is None:
                return None
            if (given := json_shape.text(value)) is not None:
                return given
        elif self.kind == "flag":
            if isinstance(value, bool):
                return value
        elif self.kind == "choice":
            if value in self.choices:  # the choices are texts: only a text equals one
                return value
        elif self.kind == "count":
            number = json_shape.whole(value)
            if number is not None and number >= self.minimum:
                return number
        elif self.kind == "seconds":
            if json_shape.is_number(value) and math.isfinite(value) and value > 0:
                return float(value)
        raise _Invalid

    def _parse(self, text: str) -> object:
        raw = text.strip()
        if self.kind == "flag":
            word = raw.lower()
            if word in TRUE_WORDS:
                return True
            if word in FALSE_WORDS:
                return False
            raise _Invalid
        if self.kind == "count":
            try:
                return self._check(int(raw))
            except ValueError:
                raise _Invalid from None
        if self.kind == "seconds":
            try:
                return self._check(float(raw))
            except ValueError:
                raise _Invalid from None
        return self._check(raw)


def problem(label: str, value: object, check: RunCheck) -> str:
    """The one sentence for a wrong run-setting value: who set it, the value, what is allowed."""
    return f"{label} is {_show(value)}: it must be {check.allowed}"


# --------------------------------------------------------------------------- program settings


def _stripped(given: Given) -> str:
    return str(given.raw).strip()


@dataclass(frozen=True)
class Text(Check):
    """Any text, stripped (a path, a URL checked where it is used, an identity, a key list)."""

    def read(self, given: Given) -> object:
        """The stripped text (None when blank)."""
        return _stripped(given) or None


@dataclass(frozen=True)
class Switch(Check):
    """On for 1/true/yes/on (any case), off for anything else; never an error."""

    def read(self, given: Given) -> object:
        """True for a true word."""
        return _stripped(given).lower() in TRUE_WORDS


Parse = Literal["int", "digits", "float"]
_KINDS: dict[Parse, str] = {
    "int": "a whole number",
    "digits": "a whole number",
    "float": "a number",
}


def _number(text: str, parse: Parse) -> int | float:
    if parse == "float":
        return float(text)
    if parse == "digits" and not text.isdigit():
        raise ValueError(text)
    return int(text)


@dataclass(frozen=True)
class AtLeast(Check):
    """A number of at least ``minimum`` (``X must be a whole number, got 'v'``)."""

    minimum: float
    parse: Parse = "int"
    """``int`` as Python reads it; ``digits``: digits only; ``float``: any number."""

    def read(self, given: Given) -> object:
        """The number, or an error naming the variable."""
        raw = _stripped(given)
        try:
            value = _number(raw, self.parse)
        except ValueError:
            kind = _KINDS[self.parse]
            raise SettingsError([f"{given.label} must be {kind}, got {raw!r}"]) from None
        if value < self.minimum:
            raise SettingsError([f"{given.label} must be at least {self.minimum:g}, got {raw}"])
        return value


@dataclass(frozen=True)
class HttpUrl(Check):
    """An ``http://`` or ``https://`` URL (``trim``: without a trailing ``/``)."""

    trim: bool = False

    def read(self, given: Given) -> object:
        """The URL, or an error naming the variable."""
        raw = _stripped(given)
        if not raw.startswith(("http://", "https://")):
            raise SettingsError([f"{given.label} must be an http:// or https:// URL, got {raw!r}"])
        return raw.rstrip("/") if self.trim else raw


@dataclass(frozen=True)
class Amount(Check):
    """A number of ``unit`` (``X must be a number of seconds, got 'v'``).

    ``floor``: smaller values are raised to it; ``minimum``: smaller values are an error.
    """

    unit: str
    floor: float | None = None
    minimum: float | None = None

    def read(self, given: Given) -> object:
        """The number, or an error naming the variable."""
        raw = _stripped(given)
        try:
            value = float(raw)
        except ValueError:
            raise SettingsError(
                [f"{given.label} must be a number of {self.unit}, got {raw!r}"]
            ) from None
        if self.minimum is not None and value < self.minimum:
            raise SettingsError([f"{given.label} must be at least {self.minimum:g}, got {raw!r}"])
        return max(self.floor, value) if self.floor is not None else value


@dataclass(frozen=True)
class Count(Check):
    """A whole number (``X must be a whole number``); smaller than ``floor`` is raised to it."""

    floor: int = 1

    def read(self, given: Given) -> object:
        """The number, or an error naming the variable."""
        try:
            return max(self.floor, int(_stripped(given)))
        except ValueError:
            raise SettingsError([f"{given.label} must be a whole number"]) from None


@dataclass(frozen=True)
class Listed(Check):
    """Comma-separated items (blanks dropped, a trailing ``/`` trimmed); ``item`` checks each."""

    item: Callable[[str, str], str] | None = None
    """Checks one item (item, label) and returns it; raises ``SettingsError``."""
    lower: bool = False

    def read(self, given: Given) -> object:
        """The items, in order."""
        items = [part.strip().rstrip("/") for part in str(given.raw).split(",") if part.strip()]
        if self.item is not None:
            items = [self.item(part, given.label) for part in items]
        return tuple(part.lower() if self.lower else part for part in items)


# --------------------------------------------------------------------------- declarations


@dataclass(frozen=True)
class Derived:
    """A default computed from other settings when the setting is not given."""

    rule: Callable[[Sources], object]
    text: str
    """The default as the README and ``config show`` state it."""


@dataclass(frozen=True)
class Setting:
    """One setting: everything about it, declared once."""

    name: str
    """The key: a ``Context`` field for a run setting, else e.g. ``api_rate_per_min`` or
    ``prometheus.url``."""
    variable: str
    """The environment variable that sets it."""
    check: Check
    description: str
    default: object = None
    """The value when nothing sets it (None: unset), or a ``Derived`` default."""
    toml_key: str | None = None
    """The key in the configuration file (``query_timeout_s``, ``prometheus.url``); None: the
    file does not set it."""
    secret: bool = False
    """Its value is never shown (``****``) and is redacted wherever it could appear."""
    run: bool = False
    """A run setting: a ``Context`` field that a caller may set for one run."""
    per_request: bool = False
    """A run setting an HTTP API request may choose (the others are the server's)."""
    shown_default: str | None = None
    """The default as the README states it, when it is not the default value written out."""
    show: Callable[[Any], str] | None = None
    """How ``config show`` writes its value (default: ``****`` for a secret, else the value)."""

    @property
    def default_text(self) -> str:
        """The default as the README's tables and ``config show`` state it."""
        if self.shown_default is not None:
            return self.shown_default
        if isinstance(self.default, Derived):
            return self.default.text
        return text_of(self.default)

    def shown(self, value: object) -> str:
        """The value as ``config show`` prints it (a secret as ``****``)."""
        if self.show is not None:
            return self.show(value)
        return MASK if self.secret else text_of(value)

    def read(self, given: Given) -> object:
        """The checked value of ``given`` (see ``Check.read``)."""
        return self.check.read(given)


def text_of(value: object) -> str:
    """A value as the README and ``config show`` write it."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple | list):
        return ",".join(str(item) for item in value) or "none"
    if isinstance(value, Mapping):
        return json.dumps(dict(value), ensure_ascii=False) if value else "none"
    return str(value)


# --------------------------------------------------------------------------- entries


def check_value(setting: Setting, value: object, label: str | None = None) -> object:
    """The checked value of a typed entry (a body, a context, an option's value).

    Raises:
        SettingsError: when the setting's rule does not allow it (the message names ``label``).
    """
    return setting.read(Given(value, label or setting.name, origin="caller", as_text=False))


def parse_value(setting: Setting, text: str, label: str | None = None) -> object:
    """The checked value of a setting given as text (a variable or an option).

    Raises:
        SettingsError: when the text is not an allowed value (the message names ``label``).
    """
    return setting.read(Given(text, label or setting.variable))


def unknown_key(key: str, known: tuple[str, ...]) -> str:
    """The sentence for a key that is not a run setting, with the closest known name."""
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"did you mean {close[0]!r}?" if close else "known settings: " + ", ".join(known)
    return f"unknown run setting {key!r} ({hint})"


def check_entries(
    values: Mapping[str, object],
    declared: Mapping[str, Setting],
    *,
    allowed: tuple[str, ...] | None = None,
    label: Callable[[str], str] | None = None,
) -> dict[str, object]:
    """Check typed settings (a request body, a LangGraph context); report every problem at once.

    Args:
        values: setting name -> value.
        declared: the settings by name.
        allowed: the names that may be set here (default: every declared one).
        label: how a name is shown in messages (default: the name itself).

    Raises:
        SettingsError: listing every unknown key and every wrong value.
    """
    names = allowed if allowed is not None else tuple(declared)
    problems: list[str] = []
    checked: dict[str, object] = {}
    for key, value in values.items():
        setting = declared.get(key)
        if setting is None or key not in names:
            if setting is not None:
                problems.append(
                    f"{key} cannot be set here; it is configured with {setting.variable}"
                )
            else:
                problems.append(unknown_key(key, names))
            continue
        try:
            checked[key] = check_value(setting, value, label(key) if label else key)
        except SettingsError as exc:
            problems.extend(exc.problems)
    if problems:
        raise SettingsError(problems)
    return checked


def describe(setting: Setting) -> str:
    """The description of a setting, with its variable (shown in LangGraph Studio's form)."""
    return f"{setting.description} ({setting.variable})"


T = TypeVar("T")


def typed_default(setting: Setting, kind: type[T]) -> T:
    """The default of ``setting``, typed for a record field (``kind`` is what it must be)."""
    if not isinstance(setting.default, kind):
        raise TypeError(f"the default of {setting.name} is not a {kind.__name__}")
    return setting.default


def as_any(value: object) -> Any:
    """``value`` typed for a dataclass field (the rules made sure of its type)."""
    return value
