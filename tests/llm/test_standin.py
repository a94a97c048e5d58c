"""The stand-in server's lifetime: it must not outlive the process that started it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("xllamacpp")

# A parent that starts the stand-in, reports the server's pid and then waits to be killed.
PARENT = """
import sys, time
from hopgraph.llm.standin import StandinServer
server = StandinServer("smollm2-135m", context=512, parallel=1).start()
print(server.process.pid, flush=True)
time.sleep(600)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its new parent) counts as gone.
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_the_standin_exits_when_its_parent_is_killed_without_cleanup():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    server_pid = None
    try:
        server_pid = int(parent.stdout.readline())
        assert alive(server_pid)
        parent.send_signal(signal.SIGKILL)  # no __exit__, no atexit: only the server's own watch can help
        parent.wait()
        deadline = time.monotonic() + 15
        while alive(server_pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not alive(server_pid), "the stand-in outlived its parent"
    finally:
        parent.kill()
        if server_pid is not None and alive(server_pid):
            os.kill(server_pid, signal.SIGKILL)  # never leave a failed run's server behind
