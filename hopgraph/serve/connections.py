"""Bounds on connections, for a server that faces clients directly (no proxy in front).

uvicorn puts no time limit on receiving a request and no cap on open connections: a client that
opens a thousand connections and never finishes their headers (slowloris) made ``/healthz`` time
out for over a minute, with no token needed. :class:`BoundedH11Protocol` is uvicorn's HTTP/1.1
protocol with two bounds from ``[serve]``:

* ``request_read_seconds``: a request (headers and body) must arrive within this time of the
  server starting to wait for it (the connection opening, or the previous response ending), and
  a response must not wait longer than this for the client to read it; otherwise the connection
  is dropped;
* ``max_connections``: a connection opened beyond this many is closed at once, so the process
  never runs out of file descriptors;
* ``max_connections_per_client``: the same per client address (an IPv6 client per /64 network,
  which one host usually holds whole), so one client cannot take every connection from the
  others (behind a proxy every client is the proxy: raise it to ``max_connections`` there and
  let the proxy bound each client).

The bounds are set by :func:`configure` (``create_app`` calls it) and hold for every connection
of the process: ``hopgraph serve`` passes the class to uvicorn as its ``http`` protocol.
A proxy in front (``examples/nginx.conf``) can also bound connections per client address.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections import Counter
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from hopgraph.config import ServeConfig

# States of the client's side while its request is not wholly received.
_RECEIVING = (h11.IDLE, h11.SEND_BODY)
# Open connections per (server, client) in this process, so a new one is counted in O(1).
_OPEN: Counter[tuple[int, str]] = Counter()


def client_key(host: str) -> str:
    """Whose connection this is: an IPv4 address (also when mapped into IPv6), or an IPv6 /64."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on receiving each request and a connection cap."""

    read_seconds: float = ServeConfig.model_fields["request_read_seconds"].default
    max_connections: int = ServeConfig.model_fields["max_connections"].default
    max_per_client: int = ServeConfig.model_fields["max_connections_per_client"].default
    _read_timer: asyncio.TimerHandle | None = None
    _write_timer: asyncio.TimerHandle | None = None
    _counted: tuple[int, str] | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if self.client:
            self._counted = (id(self.server_state), client_key(self.client[0]))
            _OPEN[self._counted] += 1
        if len(self.connections) > self.max_connections or (
            self._counted and _OPEN[self._counted] > self.max_per_client
        ):
            transport.abort()  # connection_lost follows and forgets it
            return
        self._await_request()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # Also when closing (``Connection: close``, HTTP/1.0): close() waits for the client to read
        # what is left to send, and a client that never does held the connection without a bound.
        self._await_request()

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self._read_timer, self._write_timer):
            if timer is not None:
                timer.cancel()
        if self._counted is not None:
            _OPEN[self._counted] -= 1
            if _OPEN[self._counted] <= 0:
                del _OPEN[self._counted]
            self._counted = None
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        """The client has stopped reading (the send buffer is full): it has as long as a request may
        take to arrive to read again, or the connection is dropped (it would hold a slot forever)."""
        super().pause_writing()
        if self._write_timer is None:
            self._write_timer = self.loop.call_later(self.read_seconds, self._drop)

    def resume_writing(self) -> None:
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None
        super().resume_writing()

    def _drop(self) -> None:
        self._write_timer = None
        self.transport.abort()  # not close(): that would wait to send what the client does not read

    def _await_request(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
        self._read_timer = self.loop.call_later(self.read_seconds, self._request_late)

    def _request_late(self) -> None:
        self._read_timer = None
        if self.transport.is_closing() or self.conn.their_state in _RECEIVING:
            self.transport.abort()

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        """Refused: hopgraph serves no WebSocket, and uvicorn's switch to its WebSocket protocol
        would leave this connection counted against its client for ever."""
        self.send_400_response("WebSocket is not served here")


def uvicorn_options(serve: ServeConfig) -> dict[str, Any]:
    """What `hopgraph serve` gives uvicorn: this protocol, the proxies it believes, and an accept
    backlog no larger than the connection cap (asyncio accepts up to a backlog of connections before
    closing any, so a flood of 1,100 took every file descriptor of a 1,024 limit, with a traceback
    per failed accept)."""
    return {
        "http": BoundedH11Protocol,
        "backlog": min(2048, serve.max_connections),
        # uvicorn trusts X-Forwarded-For from loopback by default: any local client could then name
        # itself a new address per request. Only the proxies named in the settings are believed.
        "proxy_headers": bool(serve.forwarded_allow_ips),
        "forwarded_allow_ips": ",".join(serve.forwarded_allow_ips) or "127.0.0.1",
    }


def configure(serve: ServeConfig) -> None:
    """Set the bounds of every connection this process serves from here on."""
    BoundedH11Protocol.read_seconds = serve.request_read_seconds
    BoundedH11Protocol.max_connections = serve.max_connections
    BoundedH11Protocol.max_per_client = serve.max_connections_per_client
