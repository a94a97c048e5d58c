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


def vocabulary_and_incidence(texts: Sequence[str], min_length: int = 2) -> tuple[list[str], sp.csr_matrix]:
    """Every keyword of ``texts`` (sorted, as :func:`build_vocabulary` with method=tokens) and their
    postings (as :func:`incidence`), tokenising each text once instead of twice: words get ids in
    order of first sight, renumbered in sorted order at the end."""
    first_seen: dict[str, int] = {}
    indptr = [0]
    indices: list[int] = []
    for text in texts:
        indices.extend({first_seen.setdefault(w, len(first_seen)) for w in words(text, min_length)})
        indptr.append(len(indices))
    vocabulary = sorted(first_seen)
    rank = np.empty(len(vocabulary), dtype=np.int64)
    rank[[first_seen[w] for w in vocabulary]] = np.arange(len(vocabulary))
    matrix = sp.csr_matrix(
        (
            np.ones(len(indices), dtype=np.float32),
            rank[np.asarray(indices, dtype=np.int64)].astype(np.int32),
            np.asarray(indptr, dtype=np.int64),
        ),
        shape=(len(texts), len(vocabulary)),
    )
    matrix.sort_indices()
    return vocabulary, matrix


def build_vocabulary(chunk_texts: Sequence[str], config: KeywordConfig) -> list[str]:
    """Keywords of the corpus, sorted; with method=tfidf only each chunk's top TF-IDF terms.

    Texts are tokenised one at a time and only per-word figures are kept, so memory grows with the
    vocabulary rather than with the corpus (holding every chunk's tokens took ~8 GB at 1M chunks);
    tf-idf tokenises the texts twice instead.
    """
    if config.method == "tokens":
        vocabulary: set[str] = set()
        for text in chunk_texts:
            vocabulary.update(words(text, config.min_length))
        return sorted(vocabulary)
    document_frequency: dict[str, int] = {}
    for text in chunk_texts:
        for w in set(words(text, config.min_length)):
            document_frequency[w] = document_frequency.get(w, 0) + 1
    n = max(len(chunk_texts), 1)
    kept: set[str] = set()
    for text in chunk_texts:
        counts: dict[str, int] = {}
        for w in words(text, config.min_length):
            counts[w] = counts.get(w, 0) + 1
        scored = sorted(counts, key=lambda w: (-counts[w] * np.log((1 + n) / (1 + document_frequency[w])), w))
        kept.update(scored[: config.tfidf_top])
    return sorted(kept)
