"""Keywords (KET) / concepts (G2ConS): words minus stop words, or TF-IDF top terms, with postings.

Postings are sparse incidence matrices (text pieces × keywords); every graph that needs lexical
overlap is computed from them, never by comparing all pairs of texts.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from hopgraph.config import KeywordConfig
from hopgraph.text import words


def incidence(texts: Sequence[str], vocabulary: dict[str, int], min_length: int = 2) -> sp.csr_matrix:
    """Binary texts × keywords matrix: the postings of every keyword over ``texts``."""
    indptr = [0]
    indices: list[int] = []
    for text in texts:
        ids = {vocabulary[w] for w in words(text, min_length) if w in vocabulary}
        indices.extend(sorted(ids))
        indptr.append(len(indices))
    data = np.ones(len(indices), dtype=np.float32)
    return sp.csr_matrix(
        (data, np.asarray(indices, dtype=np.int32), np.asarray(indptr, dtype=np.int64)),
        shape=(len(texts), len(vocabulary)),
    )


def build_vocabulary(chunk_texts: Sequence[str], config: KeywordConfig) -> list[str]:
    """Keywords of the corpus, sorted; with method=tfidf only each chunk's top TF-IDF terms."""
    tokenised = [words(text, config.min_length) for text in chunk_texts]
    if config.method == "tokens":
        return sorted({w for toks in tokenised for w in toks})
    document_frequency: dict[str, int] = {}
    for toks in tokenised:
        for w in set(toks):
            document_frequency[w] = document_frequency.get(w, 0) + 1
    n = max(len(tokenised), 1)
    kept: set[str] = set()
    for toks in tokenised:
        counts: dict[str, int] = {}
        for w in toks:
            counts[w] = counts.get(w, 0) + 1
        scored = sorted(counts, key=lambda w: (-counts[w] * np.log((1 + n) / (1 + document_frequency[w])), w))
        kept.update(scored[: config.tfidf_top])
    return sorted(kept)
