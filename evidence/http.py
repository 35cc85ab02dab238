"""The HTTP client every real backend uses: timeouts, auth, TLS, bounded reads, error mapping.

``BackendClient.get_json`` returns the decoded JSON of a 2xx answer, or raises
``BackendRequestError`` with one line saying which backend failed, what happened (the server's own
message where it gave one, read by the backend's ``error_reader``) and which setting to check.
Secrets of the backend (token, password, header values) never appear in an error: every message is
redacted before it leaves this module, and URLs are shown without credentials.
"""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, NoReturn

import httpx

from evidence.config import BackendSettings, redact
from state.display import one_line
from tools.backend import BackendError, BackendReport

MAX_RESPONSE_BYTES = 32 * 1024 * 1024
"""A larger answer is refused (the query should be narrowed), never read into memory whole."""

SERVER_TEXT_CHARS = 300
"""How much of a server's own message an error keeps (one line)."""

ErrorReader = Callable[[int, bytes], str | None]
"""Reads a backend's error body (status, raw bytes) into its message, or None when it has none."""


class BackendRequestError(BackendError):
    """A backend request failed; ``setting`` names the variable to check, ``kind`` the failure.

    ``kind`` is ``unreachable``, ``timeout``, ``tls``, ``auth``, ``not_found``, ``server`` (any
    other error status; ``status`` holds it) or ``invalid`` (an answer that is not usable JSON).
    """

    def __init__(self, message: str, *, kind: str, setting: str, status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.setting = setting
        self.status = status


def failed_report(backend: str, url: str | None, exc: BackendError) -> BackendReport:
    """A doctor's ``error`` report of a backend, naming the setting to check when known."""
    report = BackendReport(backend=backend, url=url, status="error", detail=str(exc))
    if isinstance(exc, BackendRequestError):
        report["setting"] = exc.setting
    return report


def plain_error_text(status: int, body: bytes) -> str | None:
    """The default error reader: the body as one line of text (None when empty)."""
    text = one_line(body.decode("utf-8", errors="replace"), SERVER_TEXT_CHARS)
    return text or None


@dataclass(eq=False, repr=False)
class BackendClient:
    """A JSON-over-HTTP client for one configured backend.

    Args:
        settings: The backend's URL, auth and TLS settings.
        timeout_s: Seconds one request may take (connect, read and write each).
        title: How the backend is named in messages (``Prometheus``).
        error_reader: Turns an error body into the server's message.
    """

    settings: BackendSettings
    _: KW_ONLY
    timeout_s: float
    title: str
    error_reader: ErrorReader = plain_error_text
    _client: httpx.Client | None = field(default=None, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    @property
    def url(self) -> str:
        """The base URL (it never carries credentials: the configuration refuses them)."""
        return self.settings.url

    def _http(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                headers = dict(self.settings.headers)
                if self.settings.token:
                    headers["Authorization"] = f"Bearer {self.settings.token}"
                auth = None
                if self.settings.user is not None and self.settings.password is not None:
                    auth = httpx.BasicAuth(self.settings.user, self.settings.password)
                verify: bool | ssl.SSLContext = True
                if self.settings.insecure:
                    verify = False
                elif self.settings.ca_file:
                    verify = self._ca_context(self.settings.ca_file)
                self._client = httpx.Client(
                    base_url=self.settings.url + "/",
                    headers=headers,
                    auth=auth,
                    verify=verify,
                    timeout=httpx.Timeout(self.timeout_s),
                    follow_redirects=False,
                    trust_env=False,
                )
            return self._client

    def _ca_context(self, ca_file: str) -> ssl.SSLContext:
        """A verifying TLS context trusting the CA bundle (httpx deprecates a path)."""
        try:
            return ssl.create_default_context(cafile=ca_file)
        except (ssl.SSLError, OSError) as exc:
            reason = one_line(str(exc), SERVER_TEXT_CHARS) or "unreadable"
            self._fail("tls", f"cannot load the CA bundle {ca_file} ({reason})", "ca_file")

    def close(self) -> None:
        """Close the connection pool (a later request opens a new one)."""
        with self._lock:
            if self._client is not None:
                self._client.close()
            self._client = None

    def _fail(self, kind: str, what: str, setting_key: str, status: int | None = None) -> NoReturn:
        setting = self.settings.variable(setting_key)
        message = f"{self.title} at {self.url}: {what}; check {setting}"
        raise BackendRequestError(
            redact(message, self.settings.secrets()), kind=kind, setting=setting, status=status
        )

    def get_json(
        self, path: str, params: Mapping[str, str] | None = None, *, not_found_key: str = "url"
    ) -> Any:
        """GET ``<url>/<path>`` and decode its JSON answer.

        Args:
            path: Below the base URL.
            params: Query parameters.
            not_found_key: The setting a 404 points at (``url``; ``index`` for a search).

        Raises:
            BackendRequestError: For any failure (see the class).
        """
        return self.request_json("GET", path, params=params, not_found_key=not_found_key)

    def post_json(
        self,
        path: str,
        body: object,
        params: Mapping[str, str] | None = None,
        *,
        not_found_key: str = "url",
    ) -> Any:
        """POST a JSON body to ``<url>/<path>`` and decode its JSON answer (see ``get_json``)."""
        return self.request_json(
            "POST", path, params=params, body=body, not_found_key=not_found_key
        )

    def request_json(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: object = None,
        not_found_key: str = "url",
    ) -> Any:
        """One request with an optional JSON body; its JSON answer (see ``get_json``)."""
        content = None if body is None else json.dumps(body, ensure_ascii=False).encode("utf-8")
        headers = {"Content-Type": "application/json"} if content is not None else None
        try:
            with self._http().stream(
                method,
                path.lstrip("/"),
                params=dict(params or {}),
                content=content,
                headers=headers,
            ) as answer:
                body_bytes = self._read(answer)
                status = answer.status_code
        except httpx.TimeoutException:
            self._fail(
                "timeout",
                f"no answer within {self.timeout_s:g} s",
                "url",
            )
        except httpx.ConnectError as exc:
            reason = one_line(str(exc), SERVER_TEXT_CHARS) or "connection failed"
            if "CERTIFICATE" in reason.upper() or "SSL" in reason.upper():
                self._fail(
                    "tls",
                    f"TLS verification failed ({reason}); set {self.settings.variable('ca_file')} "
                    f"or {self.settings.variable('insecure')}=1",
                    "ca_file",
                )
            self._fail("unreachable", f"cannot connect ({reason})", "url")
        except httpx.HTTPError as exc:
            self._fail(
                "unreachable", f"request failed ({one_line(str(exc), SERVER_TEXT_CHARS)})", "url"
            )
        body = body_bytes
        if status in (401, 403):
            said = self.error_reader(status, body)
            key = "user" if self.settings.user is not None else "token"
            if self.settings.user is not None:
                password = self.settings.variable("password")
                key_text = f"{self.settings.variable('user')} / {password}"
            else:
                key_text = self.settings.variable("token")
            unset = "" if self.settings.token or self.settings.user else " (none is set)"
            self._fail(
                "auth",
                f"HTTP {status}, the credentials were refused"
                + (f" ({said})" if said else "")
                + f"; the credentials are {key_text}{unset}",
                key,
                status,
            )
        if status == 404:
            said = self.error_reader(status, body) if not_found_key != "url" else None
            self._fail(
                "not_found",
                f"HTTP 404 for /{path.lstrip('/')}"
                + (f": {said}" if said else " (is this the API's base URL?)"),
                not_found_key,
                status,
            )
        if not 200 <= status < 300:
            said = self.error_reader(status, body) or "no message"
            raise BackendRequestError(
                redact(f"{self.title} answered HTTP {status}: {said}", self.settings.secrets()),
                kind="server",
                setting=self.settings.variable("url"),
                status=status,
            )
        try:
            return json.loads(body)
        except ValueError:
            self._fail("invalid", "the answer is not JSON (is this the right URL?)", "url", status)

    def _read(self, answer: httpx.Response) -> bytes:
        chunks: list[bytes] = []
        size = 0
        for chunk in answer.iter_bytes():
            size += len(chunk)
            if size > MAX_RESPONSE_BYTES:
                self._fail(
                    "invalid",
                    f"the answer is larger than {MAX_RESPONSE_BYTES // (1024 * 1024)} MB; "
                    "narrow the query",
                    "url",
                    answer.status_code,
                )
            chunks.append(chunk)
        return b"".join(chunks)
