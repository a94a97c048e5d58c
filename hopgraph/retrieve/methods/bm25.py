"""BM25 over sub-chunks: the lexical baseline of the multi-hop papers, from the index's postings.

The postings record whether a sub-chunk contains a keyword, not how often, so term frequency is
binary: a matched keyword adds idf · (k1 + 1) / (1 + k1 · (1 − b + b · length / mean length)).
Only the question's own words that are keywords of the index take part (no vectors), so a
question with none of them ranks nothing. Document frequencies, the piece count and the mean
length are counted over the pieces the reader may see, so forbidden text changes no score.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from hopgraph.config import RetrievalConfig
from hopgraph.retrieve.loaded import LoadedIndex
from hopgraph.retrieve.packing import Candidate
from hopgraph.retrieve.query import SEEDS_TRACED, Query, Scope, ranked
from hopgraph.retrieve.registry import register

K1, B = 1.2, 0.75  # the usual BM25 constants


def bm25_scores(index: LoadedIndex, keyword_ids: list[int], readable: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(BM25 score, matched keyword with the largest idf or -1) per sub-chunk, over readable ones only."""
    postings = index.keyword_units  # keywords × sub-chunks
    n_units, n_readable = len(readable), int(readable.sum())
    scores = np.zeros(n_units)
    best = np.full(n_units, -1, dtype=np.int64)
    best_idf = np.zeros(n_units)
    lengths = index.unit_tokens.astype(np.float64)
    mean_length = lengths[readable].mean() if n_readable else 1.0
    norm = K1 * (1 - B + B * lengths / max(mean_length, 1.0))
    for kw in keyword_ids:
        units = postings.indices[postings.indptr[kw] : postings.indptr[kw + 1]]
        units = units[readable[units]]
        idf = np.log1p((n_readable - len(units) + 0.5) / (len(units) + 0.5))
        scores[units] += idf * (K1 + 1) / (1 + norm[units])
        stronger = units[idf > best_idf[units]]
        best[stronger], best_idf[stronger] = kw, idf
    return scores, best


@register(
    "bm25",
    order=15,
    embeds=False,
    description="Sub-chunks by BM25 over the question's keywords (binary term frequency; the lexical baseline).",
)
def rank(index: LoadedIndex, query: Query, scope: Scope, config: RetrievalConfig) -> Iterator[Candidate]:
    postings = index.keyword_units
    for kw in query.keyword_ids:
        if len(query.seeds) >= SEEDS_TRACED:
            break
        if scope.units[postings.indices[postings.indptr[kw] : postings.indptr[kw + 1]]].any():
            query.seeds.append(f"keyword:{index.keywords[kw]}")
    scores, best = bm25_scores(index, query.keyword_ids, scope.units)
    matched = scope.units & (scores > 0)
    return ranked("unit", scores, matched, lambda u: f"bm25 via keyword:{index.keywords[best[u]]}")
