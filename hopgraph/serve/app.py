"""The ASGI app of `hopgraph serve`: the shared :class:`~hopgraph.serve.service.Service` on
``app.state``, the routers, the error handlers and the outer guard.

Where things live: request bodies in ``schemas``, errors in ``errors``, the body guard and timing
in ``middleware``, who-may-do-what and retrieval/answer bounds in ``service``, the endpoints in
``routes`` (file upload and the document list in ``documents``), the web page and API description
pages in ``docs``.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi import FastAPI

from hopgraph.config import HopgraphConfig
from hopgraph.errors import ConfigError
from hopgraph.serve import connections, openai
from hopgraph.serve.auth import TokenBook
from hopgraph.serve.docs import install_pages
from hopgraph.serve.documents import router as documents_router
from hopgraph.serve.errors import install_error_handlers
from hopgraph.serve.middleware import GuardMiddleware
from hopgraph.serve.replicas import Replica
from hopgraph.serve.routes import router
from hopgraph.serve.service import Service
from hopgraph.version import __version__

# Endpoints whose body is a question (serve.max_question_body_bytes), not documents (serve.max_body_bytes).
QUESTION_PATHS = frozenset({"/v1/retrieve", "/v1/answer", "/v1/chat/completions"})
ADMIN_BODY_PATHS = frozenset({"/v1/documents", "/v1/documents/upload"})  # admin-only endpoints with a body


def create_app(root: str | Path, config: HopgraphConfig, tokens: TokenBook, *, start_jobs: bool = True) -> FastAPI:
    """The ASGI app over index ``root``; loads the live version (all of it) before returning.

    While it runs, it follows the live version and runs update jobs when it leads (see
    ``hopgraph.serve.replicas``); ``start_jobs=False`` does neither (a fixed snapshot)."""
    connections.configure(config.serve)
    service = Service(Path(root), config, tokens)
    replica = Replica(service.root, service.holder, service.jobs, config.serve)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if start_jobs:
            replica.start()
        yield
        if start_jobs:
            replica.stop()
        service.close()

    app = FastAPI(
        lifespan=lifespan,
        title="hopgraph",
        version=__version__,
        docs_url=None,  # /docs and /redoc come from docs.install_pages, with their assets served locally
        # "/v1/retrieve/" is a 404, not a redirect to an address built from the request's Host header
        redirect_slashes=False,
        redoc_url=None,
        swagger_ui_oauth2_redirect_url=None,
        description="Multi-hop retrieval and answers with provenance over a private index. "
        "Every endpoint needs `Authorization: Bearer <token>` except /healthz (liveness and live version), "
        "/docs, /redoc and /openapi.json (this API description, which holds no index data) and / with its "
        "assets under /static/ (the web page, which asks the API with the token one signs in with). "
        "Index counts and /metrics need the admin scope.",
    )
    app.state.service, app.state.replica = service, replica
    app.state.holder, app.state.jobs, app.state.metrics = service.holder, service.jobs, service.metrics
    install_error_handlers(app)
    app.include_router(router)
    app.include_router(documents_router)
    app.include_router(openai.router)
    install_pages(app)
    app.add_middleware(
        GuardMiddleware,
        metrics=service.metrics,
        max_body_bytes=config.serve.max_body_bytes,
        request_log=service.request_log,
        gate=service.admit,
        question_paths=QUESTION_PATHS,
        max_question_bytes=config.serve.max_question_body_bytes,
        admin_paths=ADMIN_BODY_PATHS,
    )
    return app


def bound_socket(host: str, port: int, *, share_port: bool = False) -> socket.socket:
    """A TCP socket bound to ``host:port``, made as uvicorn makes its own (IPv6 for a host with a
    colon, SO_REUSEADDR, which still refuses a port another process listens on); ``share_port`` adds
    SO_REUSEPORT (``serve.socket_per_worker``). ConfigError naming the port where it cannot be bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if share_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"cannot serve at {host}:{port}: {exc.strerror or exc}; choose another --serve.port or --serve.host, "
            "or stop what listens there"
        ) from None
    return sock


def check_address(host: str, port: int) -> None:
    """Bind ``host:port`` once and let it go, so a port in use is named before minutes of loading the
    index, not after."""
    bound_socket(host, port).close()
