"""Bounds on connections, for a server that faces clients directly (no proxy in front).

uvicorn puts no time limit on receiving a request and no cap on open connections: a client that
opens a thousand connections and never finishes their headers (slowloris) made ``/healthz`` time
out for over a minute, with no token needed. :class:`BoundedH11Protocol` is uvicorn's HTTP/1.1
protocol with two bounds from ``[serve]``:

* ``request_read_seconds``: a request (headers and body) must arrive within this time of the
  server starting to wait for it (the connection opening, or the previous response ending);
  otherwise the connection is closed;
* ``max_connections``: a connection opened beyond this many is closed at once, so the process
  never runs out of file descriptors;
* ``max_connections_per_client``: the same per client address, so one client cannot take every
  connection from the others (behind a proxy every client is the proxy: raise it to
  ``max_connections`` there and let the proxy bound each client).

The bounds are set by :func:`configure` (``create_app`` calls it) and hold for every connection
of the process: ``hopgraph serve`` passes the class to uvicorn as its ``http`` protocol.
A proxy in front (``examples/nginx.conf``) can also bound connections per client address.
"""

from __future__ import annotations

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from hopgraph.config import ServeConfig

# States of the client's side while its request is not wholly received.
_RECEIVING = (h11.IDLE, h11.SEND_BODY)


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on receiving each request and a connection cap."""

    read_seconds: float = ServeConfig.model_fields["request_read_seconds"].default
    max_connections: int = ServeConfig.model_fields["max_connections"].default
    max_per_client: int = ServeConfig.model_fields["max_connections_per_client"].default
    _read_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections or self._from_this_client() > self.max_per_client:
            transport.abort()  # connection_lost follows and forgets it
            return
        self._await_request()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._await_request()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
        super().connection_lost(exc)

    def _from_this_client(self) -> int:
        host = self.client[0] if self.client else None
        return sum(1 for other in self.connections if (getattr(other, "client", None) or ("",))[0] == host)

    def _await_request(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
        self._read_timer = self.loop.call_later(self.read_seconds, self._request_late)

    def _request_late(self) -> None:
        self._read_timer = None
        if self.conn.their_state in _RECEIVING and not self.transport.is_closing():
            self.transport.close()


def configure(serve: ServeConfig) -> None:
    """Set the bounds of every connection this process serves from here on."""
    BoundedH11Protocol.read_seconds = serve.request_read_seconds
    BoundedH11Protocol.max_connections = serve.max_connections
    BoundedH11Protocol.max_per_client = serve.max_connections_per_client
