"""Loopback ports for tests that need nothing to answer on them."""

from __future__ import annotations

import socket

_held: list[socket.socket] = []  # open for the test process's life, so no other test's server takes the port


def dead_port() -> int:
    """A loopback port bound here but never listened on: connecting to it is refused, for as long as
    the tests run (a port merely found free could be bound meanwhile by another test's server)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    _held.append(sock)
    return int(sock.getsockname()[1])
