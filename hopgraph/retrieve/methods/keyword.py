"""Keyword-RAG (KET Alg. 4 lines 2–4): seed keywords by cosine until their sub-chunks hold
pool_factor·λ tokens, then those sub-chunks ranked by cosine to the query."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from hopgraph.config import RetrievalConfig
from hopgraph.deadline import check_deadline
from hopgraph.retrieve.loaded import LoadedIndex
from hopgraph.retrieve.packing import Candidate
from hopgraph.retrieve.query import Query, Scope, descending, keyword_cosine, ranked, unit_cosine
from hopgraph.retrieve.registry import register


@register(
    "keyword",
    order=30,
    needs=(),
    settings="keyword",
    description="Sub-chunks reached through the query's nearest keywords in the keyword–sub-chunk bipartite graph "
    "(KET Alg. 4).",
)
def rank(index: LoadedIndex, query: Query, scope: Scope, config: RetrievalConfig) -> Iterable[Candidate]:
    target = config.keyword.pool_factor * config.budget
    postings = index.keyword_units
    in_pool = np.zeros(len(index.unit_tokens), dtype=bool)
    reached_by = np.full(len(index.unit_tokens), -1, dtype=np.int64)
    # Sub-chunks the walk can reach: usable ones that hold a keyword.
    keyed = index.memo("keyword", "keyed_units", lambda: np.bincount(postings.indices, minlength=len(in_pool)) > 0)
    tokens, left = 0, int((scope.units & keyed).sum())
    similarity = keyword_cosine(index, query, scope)
    for kw in descending(similarity):
        # Past the readable keywords (-inf), or once every readable piece is in: nothing more to reach.
        if left == 0 or similarity[kw] == -np.inf:
            break
        check_deadline()
        units = postings.indices[postings.indptr[kw] : postings.indptr[kw + 1]]
        fresh = units[scope.units[units] & ~in_pool[units]]
        in_pool[fresh] = True
        reached_by[fresh] = kw
        tokens += int(index.unit_tokens[fresh].sum())
        left -= len(fresh)
        if tokens >= target:
            break
    return ranked(
        "unit",
        unit_cosine(index, query, config.sentence_mix),
        scope.units,
        lambda u: f"keyword:{index.keywords[reached_by[u]]}",
        pool=np.flatnonzero(in_pool),
    )
