"""Shared fixtures. Tests never reach the network: outbound sockets are refused except loopback."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

_real_connect = socket.socket.connect


def _guarded_connect(self: socket.socket, address: Any) -> Any:
    host = address[0] if isinstance(address, tuple) else address
    if isinstance(host, str) and (
        host in {"localhost", "::1"} or host.startswith("127.") or host.startswith("/")
    ):
        return _real_connect(self, address)
    if self.family == socket.AF_UNIX:
        return _real_connect(self, address)
    raise RuntimeError(f"tests must not reach the network (tried to connect to {address!r})")


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(socket.socket, "connect", _guarded_connect)
    yield
