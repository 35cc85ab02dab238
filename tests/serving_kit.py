"""What the serving and persistence tests share: crashed children, resumes, loopback endpoints.

A child process runs ``tests/crash_child.py`` until its second tool call and is killed there (as a
power cut would leave a diagnosis); ``superbiz diagnose --resume`` runs in a child of its own; a
test that runs a lone tool call uses the ids every such test uses; a stand-in HTTP endpoint is
served from a thread of the test process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from state.records import Invocation
from tools.runner import ToolRunner

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "order-service 为什么报 500 错误？"


def child_env(**extra: str) -> dict[str, str]:
    """This environment for a child process: no model or superbiz setting, the checkout importable.

    Args:
        extra: Variables set on top.

    Returns:
        The child's environment.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "SUPERBIZ_"))}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


def kill_at_second_tool_call(
    database_url: str, thread: str, marker: Path, *args: str, env: dict[str, str]
) -> int:
    """Run ``tests/crash_child.py`` until its second tool call, then SIGKILL it.

    Args:
        database_url: The database the child records its diagnosis in.
        thread: The thread it diagnoses ``QUESTION`` on.
        marker: The file the child writes when it reaches its second tool call.
        args: More options of the child (``--lang``, ``--env``).
        env: The child's environment.

    Returns:
        The child's return code.
    """
    child = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "tests" / "crash_child.py"),
            database_url,
            thread,
            str(marker),
            QUESTION,
            *args,
        ],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 120
    while not marker.exists():
        if child.poll() is not None or time.monotonic() > deadline:
            child.kill()
            output = child.communicate()[0].decode(errors="replace")
            pytest.fail(f"the child never reached its second tool call:\n{output}")
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    return child.returncode


def resume_in_child(
    database_url: str, thread: str, *flags: str
) -> subprocess.CompletedProcess[bytes]:
    """Run ``superbiz diagnose --resume`` on ``thread`` in a child process, as a user would.

    Args:
        database_url: The database of the interrupted diagnosis.
        thread: Its thread.
        flags: More options of the command (``--json``, ``--offline``).

    Returns:
        The finished child, its output captured.
    """
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "apps.cli",
            "diagnose",
            "--resume",
            "--thread",
            thread,
            "--db",
            database_url,
            *flags,
        ],
        env=child_env(),
        cwd=ROOT,
        capture_output=True,
        timeout=300,
        check=False,
    )


def one_call(runner: ToolRunner, name: str, args: dict[str, Any]) -> Invocation:
    """Run one tool call through ``runner``, as round 1 of diagnosis ``d1`` on thread ``t1``.

    Args:
        runner: The tool runner.
        name: The tool's name.
        args: Its arguments.

    Returns:
        The invocation's record.
    """
    return runner.run(
        {"name": name, "args": args, "id": "c1"}, diagnosis_id="d1", thread_id="t1", round=1
    )


@contextmanager
def serve_on_loopback(
    handler: type[BaseHTTPRequestHandler], *, daemon_threads: bool = False
) -> Iterator[int]:
    """Serve ``handler`` on a free 127.0.0.1 port from a thread, for the block.

    Args:
        handler: The request handler.
        daemon_threads: Whether closing leaves requests still being answered to themselves
            (otherwise it waits for them).

    Yields:
        The port.
    """
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = daemon_threads
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
