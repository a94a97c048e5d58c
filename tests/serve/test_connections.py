"""Slow clients and connection floods, over real sockets: a request must arrive within
serve.request_read_seconds, and a process keeps at most serve.max_connections connections, and
at most serve.max_connections_per_client from one address (other loopback addresses, 127.0.0.x,
stand for other clients). Before these bounds, 1,100 connections that never finished their
headers (no token needed) made /healthz time out for over a minute."""

from __future__ import annotations

import socket
import time

import httpx
import pytest

from hopgraph.serve.connections import client_key
from tests.serve.support import LiveServer

READ_SECONDS = 2.0
MAX_CONNECTIONS = 25
MAX_PER_CLIENT = 10


@pytest.fixture(scope="module")
def server(acl_index, serve_config):
    limits = {
        "request_read_seconds": READ_SECONDS,
        "max_connections": MAX_CONNECTIONS,
        "max_connections_per_client": MAX_PER_CLIENT,
    }
    config = serve_config.model_copy(update={"serve": serve_config.serve.model_copy(update=limits)})
    with LiveServer(
        acl_index,
        config,
    ) as live:
        yield live


def connect(server: LiveServer, first: bytes = b"", client: str = "127.0.0.1") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30, source_address=(client, 0))
    if first:
        sock.sendall(first)
    return sock


def closed_by_server(sock: socket.socket, within: float) -> bool:
    """Whether the server closes the connection within ``within`` seconds (reads until it does)."""
    sock.settimeout(within)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


def test_a_request_that_never_finishes_arriving_is_disconnected(server) -> None:
    partial_headers = connect(server, b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")
    silent = connect(server)
    partial_body = connect(server, b"POST /v1/retrieve HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000\r\n\r\n{")
    try:
        started = time.monotonic()
        for sock in (partial_headers, silent, partial_body):
            assert closed_by_server(sock, within=READ_SECONDS + 10)
        assert time.monotonic() - started >= READ_SECONDS * 0.9  # not at once: after the read bound
    finally:
        for sock in (partial_headers, silent, partial_body):
            sock.close()


def test_a_prompt_client_on_a_kept_alive_connection_is_served_again_and_again(server) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for _ in range(3):
            assert client.get("/healthz").status_code == 200
            time.sleep(READ_SECONDS / 2)  # idle between requests, under the bound each time
        assert client.get("/healthz").status_code == 200


def closed_at_once(flood: list[socket.socket], started: float, wanted: int) -> int:
    """How many of ``flood`` the server closed as they came, counted until ``wanted`` are or until
    half the read bound has passed (a busy machine may take a moment to accept them all); always
    before the read bound closes any."""
    closed: set[int] = set()
    while True:
        closed |= {n for n, sock in enumerate(flood) if n not in closed and closed_by_server(sock, within=0.01)}
        if len(closed) >= wanted or time.monotonic() - started > READ_SECONDS / 2:
            break
        time.sleep(0.1)
    assert time.monotonic() - started < READ_SECONDS  # counted before the read bound closes any
    return len(closed)


def test_one_client_flooding_connections_takes_none_from_the_others(server) -> None:
    started = time.monotonic()
    flood = [connect(server, client="127.0.0.2") for _ in range(3 * MAX_PER_CLIENT)]
    try:
        assert closed_at_once(flood, started, 2 * MAX_PER_CLIENT) >= 2 * MAX_PER_CLIENT  # all beyond its share
        with httpx.Client(base_url=server.url, timeout=30) as client:  # another address: served
            assert client.get("/healthz").status_code == 200
    finally:
        for sock in flood:
            sock.close()


def test_connections_beyond_the_process_cap_are_closed_and_the_server_recovers(server) -> None:
    started = time.monotonic()
    flood = [connect(server, client=f"127.0.0.{n}") for n in (3, 4, 5) for _ in range(MAX_PER_CLIENT)]
    try:
        assert closed_at_once(flood, started, len(flood) - MAX_CONNECTIONS) >= len(flood) - MAX_CONNECTIONS
        time.sleep(READ_SECONDS + 1)  # the rest are disconnected for sending nothing
        assert all(closed_by_server(sock, within=10) for sock in flood)
        with httpx.Client(base_url=server.url, timeout=30) as client:
            assert client.get("/healthz").status_code == 200
    finally:
        for sock in flood:
            sock.close()


def test_a_client_that_stops_reading_responses_is_dropped(server) -> None:
    """Pipelined requests whose responses are never read fill the send buffer; the connection is
    dropped once it has waited request_read_seconds for the client to read (it held its slot for
    ever: a few addresses could take every connection)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    sock.bind(("127.0.0.6", 0))
    sock.connect(("127.0.0.1", server.port))
    connections = server.server.server_state.connections
    try:
        sock.sendall(b"GET /openapi.json HTTP/1.1\r\nHost: localhost\r\n\r\n" * 200)  # never read

        def held() -> bool:
            return any(getattr(c, "client", None) == sock.getsockname() for c in list(connections))

        time.sleep(0.5)
        assert held()
        deadline = time.monotonic() + READ_SECONDS + 15
        while held():
            assert time.monotonic() < deadline, "the connection of a client that reads nothing was kept"
            time.sleep(0.1)
    finally:
        sock.close()


@pytest.mark.parametrize(
    ("host", "key"),
    [
        ("192.0.2.7", "192.0.2.7"),
        ("::ffff:192.0.2.7", "192.0.2.7"),
        ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:bbbb::9", "2001:db8:1:2::/64"),
        ("2001:db8:1:3::1", "2001:db8:1:3::/64"),
    ],
)
def test_an_ipv6_client_is_counted_by_its_64_network(host: str, key: str) -> None:
    assert client_key(host) == key  # one host holds a /64: counted per address, it had 2^64 shares


def test_websocket_upgrades_are_refused_and_leave_no_connection_counted(server) -> None:
    """uvicorn switched an upgrade request to its WebSocket protocol, whose end our count never
    saw: max_connections_per_client upgrades (each refused by the app) shut that address out."""
    upgrade = (
        b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
        b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    )
    for _ in range(MAX_PER_CLIENT + 2):
        sock = connect(server, upgrade, client="127.0.0.7")
        try:
            sock.settimeout(10)
            assert sock.recv(200).startswith(b"HTTP/1.1 4")  # refused (by the app, before the fix)
        finally:
            sock.close()
    time.sleep(0.3)
    with httpx.Client(
        base_url=server.url, timeout=30, transport=httpx.HTTPTransport(local_address="127.0.0.7")
    ) as client:
        assert client.get("/healthz").status_code == 200


def test_a_closing_connection_whose_client_reads_nothing_is_dropped() -> None:
    """With ``Connection: close`` uvicorn closes the transport as the response ends, and close()
    waits for the client to read what is left; a client that never read held the connection with
    no bound where what was left was under the buffer's high-water mark (64 kB: no pause_writing).
    Small socket buffers on both ends put a response of tens of kB there on any kernel."""
    import threading

    import uvicorn

    from hopgraph.serve.connections import BoundedH11Protocol

    async def sized(scope, receive, send):  # a plain ASGI app: GET /N answers N bytes
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        size = int(scope["path"].strip("/"))
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % size)]})
        await send({"type": "http.response.body", "body": b"x" * size})

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # accepted sockets inherit it
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    bounds = ("read_seconds", "max_connections", "max_per_client")
    saved = [getattr(BoundedH11Protocol, name) for name in bounds]
    for name, value in zip(bounds, (READ_SECONDS, 500, 500)):  # (the module's server set lower caps)
        setattr(BoundedH11Protocol, name, value)
    uv = uvicorn.Server(uvicorn.Config(sized, log_level="error", http=BoundedH11Protocol))
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    socks = []
    try:
        deadline = time.monotonic() + 30
        while not uv.started:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        for size in range(20_000, 62_000, 6_000):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
            sock.connect(("127.0.0.1", port))
            sock.sendall(b"GET /%d HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n" % size)
            socks.append(sock)  # never read
        deadline = time.monotonic() + 2 * READ_SECONDS + 15
        while uv.server_state.connections:
            assert time.monotonic() < deadline, f"{len(uv.server_state.connections)} connections kept"
            time.sleep(0.2)
    finally:
        for sock in socks:
            sock.close()
        uv.should_exit = True
        thread.join(10)
        listener.close()
        for name, value in zip(bounds, saved):
            setattr(BoundedH11Protocol, name, value)
