"""The ASGI app of `hopgraph serve`: the shared :class:`~hopgraph.serve.service.Service` on
``app.state``, the routers, the error handlers and the outer guard.

Where things live: request bodies in ``schemas``, errors in ``errors``, the body guard and timing
in ``middleware``, who-may-do-what and retrieval/answer bounds in ``service``, the endpoints in
``routes`` (file upload and the document list in ``documents``), the web page and API description
pages in ``docs``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi import FastAPI

from hopgraph.config import HopgraphConfig
from hopgraph.serve.auth import TokenBook
from hopgraph.serve.docs import install_pages
from hopgraph.serve.documents import router as documents_router
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
        docs_url=None,  # /docs and /redoc come from docs.install_pages, with their assets served locally
        redoc_url=None,
        swagger_ui_oauth2_redirect_url=None,
        description="Multi-hop retrieval and answers with provenance over a private index. "
        "Every endpoint needs `Authorization: Bearer <token>` except /healthz (liveness and live version), "
        "/docs, /redoc and /openapi.json (this API description, which holds no index data) and / with its "
        "assets under /static/ (the web page, which asks the API with the token one signs in with). "
        "Index counts and /metrics need the admin scope.",
    )
    app.state.service = service
    app.state.holder, app.state.jobs, app.state.metrics = service.holder, service.jobs, service.metrics
    install_error_handlers(app)
    app.include_router(router)
    app.include_router(documents_router)
    install_pages(app)
    app.add_middleware(GuardMiddleware, metrics=service.metrics, max_body_bytes=config.serve.max_body_bytes)
    return app
