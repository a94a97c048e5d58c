"""The ASGI app of `hopgraph serve`: the shared :class:`~hopgraph.serve.service.Service` on
``app.state``, the routers, the error handlers and the outer guard.

Where things live: request bodies in ``schemas``, errors in ``errors``, the body guard and timing
in ``middleware``, who-may-do-what and retrieval/answer bounds in ``service``, the endpoints in
``routes``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi import FastAPI

from hopgraph.config import HopgraphConfig
from hopgraph.serve.auth import TokenBook
from hopgraph.serve.errors import install_error_handlers
from hopgraph.serve.middleware import GuardMiddleware
from hopgraph.serve.routes import router
from hopgraph.serve.service import Service
from hopgraph.version import __version__


def create_app(root: str | Path, config: HopgraphConfig, tokens: TokenBook, *, start_jobs: bool = True) -> FastAPI:
    """The ASGI app over index ``root``; loads the live version (all of it) before returning."""
    service = Service(Path(root), config, tokens)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if start_jobs:
            service.jobs.start()
        yield
        if start_jobs:
            service.jobs.stop()
        service.close()

    app = FastAPI(
        lifespan=lifespan,
        title="hopgraph",
        version=__version__,
        redoc_url=None,
        swagger_ui_oauth2_redirect_url=None,
        description="Multi-hop retrieval and answers with provenance over a private index. "
        "Every endpoint needs `Authorization: Bearer <token>` except /healthz (liveness and live version) and "
        "/docs and /openapi.json (this API description, which holds no index data). "
        "Index counts and /metrics need the admin scope.",
    )
    app.state.service = service
    app.state.holder, app.state.jobs, app.state.metrics = service.holder, service.jobs, service.metrics
    install_error_handlers(app)
    app.include_router(router)
    app.add_middleware(
        GuardMiddleware,
        metrics=service.metrics,
        max_body_bytes=config.serve.max_body_bytes,
        request_log=service.request_log,
    )
    return app
