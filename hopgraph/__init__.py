"""hopgraph: on-premises multi-granular Graph-RAG with open-weight models.

The public API (see ``hopgraph.api`` and the README's "Python API"): :class:`Index` to build, open,
query, answer and update an index; :class:`Config` (every setting); :class:`Document`;
:class:`MetadataFilter`; result types :class:`RetrievalResult`, :class:`Evidence`,
:class:`AnswerResult` and :class:`Job`; :func:`load_config` (a TOML file and dotted overrides).
Names load on first use, so ``import hopgraph.retrieve``
stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hopgraph.version import __version__

__all__ = [
    "__version__",
    "AnswerResult",
    "Config",
    "Document",
    "Evidence",
    "Index",
    "Job",
    "LLMConfig",
    "MetadataFilter",
    "RetrievalResult",
    "load_config",
]

if TYPE_CHECKING:
    from hopgraph.api import (
        AnswerResult,
        Config,
        Document,
        Evidence,
        Index,
        Job,
        LLMConfig,
        MetadataFilter,
        RetrievalResult,
        load_config,
    )


def __getattr__(name: str) -> Any:
    if name in __all__ and name != "__version__":
        from hopgraph import api

        return getattr(api, name)
    raise AttributeError(f"module 'hopgraph' has no attribute {name!r}")
