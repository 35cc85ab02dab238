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
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from state import catalog
from state.configuration import Sources
from state.settings import Setting, SettingsError, typed_default

ANONYMOUS = "anonymous"
KEYS_ENV = catalog.API_KEYS.variable
KEYS_FILE_ENV = catalog.API_KEYS_FILE.variable


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
        sources = Sources(environ)
        keys = cls()
        for entry in (sources.text(KEYS_ENV) or "").split(","):
            if entry.strip():
                keys._add_pair(entry, KEYS_ENV)
        path = read(catalog.API_KEYS_FILE, sources)
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


def read(setting: Setting, sources: Sources | None = None) -> Any:
    """The checked value of one of the API's settings (``state/catalog.py``).

    Raises:
        ConfigError: naming the variable, for a value its rule does not allow.
    """
    try:
        return (sources or Sources()).value(setting)
    except SettingsError as exc:
        raise ConfigError(str(exc)) from None


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

    max_question_chars: int = typed_default(catalog.API_MAX_QUESTION_CHARS, int)
    max_body_bytes: int = typed_default(catalog.API_MAX_BODY_BYTES, int)
    rate_per_minute: int = typed_default(catalog.API_RATE_PER_MIN, int)
    rate_burst: int = typed_default(catalog.API_RATE_PER_MIN, int)
    max_runs: int | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Limits:
        """Read the ``SUPERBIZ_API_*`` limit variables (unset: the defaults).

        Raises:
            ConfigError: for a value that is not a whole number or is out of range.
        """
        sources = Sources(environ)
        rate: int = read(catalog.API_RATE_PER_MIN, sources)
        question: int = read(catalog.API_MAX_QUESTION_CHARS, sources)
        body: int = read(catalog.API_MAX_BODY_BYTES, sources)
        burst: int | None = read(catalog.API_RATE_BURST, sources)
        return cls(
            max_question_chars=question,
            max_body_bytes=body,
            rate_per_minute=rate,
            rate_burst=burst if burst is not None else max(rate, 1),
            max_runs=read(catalog.API_MAX_RUNS, sources),
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
