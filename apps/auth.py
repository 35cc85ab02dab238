"""Who is calling the HTTP API, and how much they may send: API keys, identities and limits.

The operator configures keys as ``key=identity`` pairs: ``SUPERBIZ_API_KEYS="key1=alice,key2=bob"``
and/or ``SUPERBIZ_API_KEYS_FILE`` (one ``key=identity`` per line, ``#`` comments and blank lines
ignored). A client sends its key as ``Authorization: Bearer <key>`` or ``X-API-Key: <key>``. With
no key configured at all, access is open and every caller is the identity ``anonymous``.

Keys are kept only as SHA-256 digests, so a lookup never compares secrets character by character.
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

ANONYMOUS = "anonymous"
KEYS_ENV = "SUPERBIZ_API_KEYS"
KEYS_FILE_ENV = "SUPERBIZ_API_KEYS_FILE"


class ConfigError(ValueError):
    """The operator's API configuration cannot be used; the message says what to fix."""


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Caller:
    """An authenticated caller.

    Attributes:
        identity: Who owns the threads this caller creates (``anonymous`` with open access).
        bucket: The rate-limit bucket: one per API key, or per client address with open access.
    """

    identity: str
    bucket: str


class ApiKeys:
    """The configured API keys; empty means open access."""

    def __init__(self, keys: Mapping[str, str] | None = None) -> None:
        self._identities: dict[str, str] = {}
        for key, identity in (keys or {}).items():
            self._add(key, identity, "api_keys")

    def _add(self, key: str, identity: str, source: str) -> None:
        key, identity = key.strip(), identity.strip()
        if not key or not identity:
            raise ConfigError(f"{source}: an entry has an empty key or identity (use key=identity)")
        if any(ch.isspace() for ch in key):
            raise ConfigError(f"{source}: an API key contains whitespace")
        digest = _digest(key)
        known = self._identities.get(digest)
        if known is not None and known != identity:
            raise ConfigError(f"{source}: one API key is given to both {known!r} and {identity!r}")
        self._identities[digest] = identity

    @property
    def open(self) -> bool:
        """True when no key is configured: everyone is ``anonymous``."""
        return not self._identities

    def __len__(self) -> int:
        return len(self._identities)

    def identity_of(self, key: str) -> str | None:
        """The identity a presented key belongs to, or None for an unknown key."""
        return self._identities.get(_digest(key))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ApiKeys:
        """Read ``SUPERBIZ_API_KEYS`` and ``SUPERBIZ_API_KEYS_FILE``.

        Raises:
            ConfigError: for a malformed entry, an unreadable file or a file without keys (a
                configured but empty file never silently opens access).
        """
        env = os.environ if environ is None else environ
        keys = cls()
        for entry in env.get(KEYS_ENV, "").split(","):
            if entry.strip():
                keys._add_pair(entry, KEYS_ENV)
        path = env.get(KEYS_FILE_ENV, "").strip()
        if path:
            try:
                text = Path(path).expanduser().read_text(encoding="utf-8")
            except OSError as exc:
                raise ConfigError(f"{KEYS_FILE_ENV}: cannot read {path}: {exc.strerror}") from exc
            before = len(keys)
            for number, line in enumerate(text.splitlines(), start=1):
                if line.strip() and not line.lstrip().startswith("#"):
                    keys._add_pair(line, f"{path} line {number}")
            if len(keys) == before:
                raise ConfigError(f"{KEYS_FILE_ENV}: {path} holds no key=identity line")
        return keys

    def _add_pair(self, entry: str, source: str) -> None:
        if "=" not in entry:
            raise ConfigError(f"{source}: expected key=identity, got an entry without '='")
        key, identity = entry.split("=", 1)
        self._add(key, identity, source)


def presented_key(headers: Mapping[str, str]) -> str | None:
    """The key a request carries (``Authorization: Bearer`` first, then ``X-API-Key``)."""
    authorization = headers.get("authorization", "")
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    key = headers.get("x-api-key", "").strip()
    return key or None


def authenticate(keys: ApiKeys, headers: Mapping[str, str], client: str) -> Caller | None:
    """The caller of a request, or None when a key is required and missing or wrong.

    Args:
        keys: The configured keys.
        headers: The request headers (lower-case names).
        client: The client address, used as the rate bucket with open access.
    """
    if keys.open:
        return Caller(ANONYMOUS, f"client:{client}")
    key = presented_key(headers)
    if key is None:
        return None
    identity = keys.identity_of(key)
    if identity is None:
        return None
    return Caller(identity, f"key:{_digest(key)[:24]}")


Number = TypeVar("Number", int, float)


def env_number(
    environ: Mapping[str, str],
    name: str,
    default: Number,
    minimum: Number,
    *,
    parse: Callable[[str], Number],
    kind: str,
) -> Number:
    """A number of at least ``minimum`` from the variable ``name`` (``default`` when unset).

    Args:
        environ: The environment.
        name: The variable.
        default: The value when the variable is unset or blank.
        minimum: The least value allowed.
        parse: Reads the text; raises ``ValueError`` for one that is not of the ``kind``.
        kind: What the value must be, for the message (``"a whole number"``).

    Raises:
        ConfigError: naming the variable, for a value that does not parse or is too small.
    """
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = parse(raw)
    except ValueError as exc:
        raise ConfigError(f"{name} must be {kind}, got {raw!r}") from exc
    if value < minimum:
        raise ConfigError(f"{name} must be at least {minimum:g}, got {raw}")
    return value


def _env_int(environ: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    return env_number(environ, name, default, minimum, parse=int, kind="a whole number")


@dataclass(frozen=True)
class Limits:
    """What one caller may send.

    Attributes:
        max_question_chars: Longest question accepted (longer: 422).
        max_body_bytes: Largest request body accepted (larger: 413).
        rate_per_minute: Requests per minute per API key (token bucket, per worker process);
            0 turns rate limiting off.
        rate_burst: Requests a key may make at once before the rate applies (bucket size).
        max_runs: Diagnoses run at the same time in one worker process; further requests wait.
            None derives it from the database pool size.
    """

    max_question_chars: int = 4000
    max_body_bytes: int = 64 * 1024
    rate_per_minute: int = 60
    rate_burst: int = 60
    max_runs: int | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Limits:
        """Read the ``SUPERBIZ_API_*`` limit variables (unset: the defaults).

        Raises:
            ConfigError: for a value that is not a whole number or is out of range.
        """
        env = os.environ if environ is None else environ
        rate = _env_int(env, "SUPERBIZ_API_RATE_PER_MIN", cls.rate_per_minute, 0)
        runs_raw = env.get("SUPERBIZ_API_MAX_RUNS", "").strip()
        return cls(
            max_question_chars=_env_int(
                env, "SUPERBIZ_API_MAX_QUESTION_CHARS", cls.max_question_chars, 1
            ),
            max_body_bytes=_env_int(env, "SUPERBIZ_API_MAX_BODY_BYTES", cls.max_body_bytes, 1024),
            rate_per_minute=rate,
            rate_burst=_env_int(env, "SUPERBIZ_API_RATE_BURST", max(rate, 1), 1),
            max_runs=_env_int(env, "SUPERBIZ_API_MAX_RUNS", 1, 1) if runs_raw else None,
        )


class RateLimiter:
    """Token buckets per caller bucket: ``rate_per_minute`` tokens a minute, ``burst`` at most.

    State lives in this process only: with several workers each has its own buckets, so a key
    may make up to ``workers`` times the rate in all.
    """

    _MAX_BUCKETS = 10_000

    def __init__(
        self, rate_per_minute: int, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._rate = rate_per_minute / 60.0
        self._burst = float(max(burst, 1))
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, bucket: str) -> float | None:
        """Spend one token; return None when allowed, else the seconds until a token is back."""
        if self._rate <= 0:
            return None
        now = self._clock()
        with self._lock:
            tokens, stamp = self._buckets.get(bucket, (self._burst, now))
            tokens = min(self._burst, tokens + (now - stamp) * self._rate)
            if tokens < 1.0:
                self._buckets[bucket] = (tokens, now)
                return (1.0 - tokens) / self._rate
            if len(self._buckets) >= self._MAX_BUCKETS and bucket not in self._buckets:
                self._forget_full(now)
            self._buckets[bucket] = (tokens - 1.0, now)
            return None

    def _forget_full(self, now: float) -> None:
        """Drop buckets that have refilled completely (they carry no state worth keeping)."""
        full = [
            name
            for name, (tokens, stamp) in self._buckets.items()
            if tokens + (now - stamp) * self._rate >= self._burst
        ]
        for name in full:
            del self._buckets[name]


def retry_after_header(seconds: float) -> str:
    """``Retry-After`` value: whole seconds, at least 1."""
    return str(max(1, math.ceil(seconds)))


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False
