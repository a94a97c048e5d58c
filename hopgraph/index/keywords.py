"""Keywords (KET) / concepts (G2ConS): words minus stop words, or TF-IDF top terms, with postings.

Postings are sparse incidence matrices (text pieces × keywords); every graph that needs lexical
overlap is computed from them, never by comparing all pairs of texts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from hopgraph.config import KeywordConfig
from hopgraph.text import words


@dataclass(frozen=True)
class KnownPostings:
    """Postings an earlier version of the index holds for some of the texts at hand (an update's
    unchanged texts): a text's keywords are a function of its text, so its row is taken, not
    tokenised again (~3 s at 100k chunks)."""

    vocabulary: Sequence[str]  # that version's keywords, its columns
    postings: sp.csr_matrix
    rows: np.ndarray  # per text, its row in ``postings`` (-1: not held)


def _assemble(
    n_texts: int, held: np.ndarray, held_rows: sp.csr_matrix, fresh: np.ndarray, fresh_ids: list[list[int]], width: int
) -> sp.csr_matrix:
    """One binary matrix from rows taken (``held_rows``, for texts ``held``) and rows found (ids per
    text of ``fresh``), each text's columns sorted."""
    lengths = np.fromiter((len(ids) for ids in fresh_ids), dtype=np.int64, count=len(fresh_ids))
    found = sp.csr_matrix(
        (
            np.ones(int(lengths.sum()), dtype=np.float32),
            np.fromiter((i for ids in fresh_ids for i in ids), dtype=np.int64, count=int(lengths.sum())),
            np.r_[0, np.cumsum(lengths)].astype(np.int64),
        ),
        shape=(len(fresh), width),
    )
    stacked = sp.vstack([held_rows, found], format="csr")
    place = np.empty(n_texts, dtype=np.int64)  # each text's row in ``stacked``
    place[np.concatenate([held, fresh]).astype(np.int64)] = np.arange(n_texts)
    matrix = stacked[place]
    matrix = sp.csr_matrix(
        (matrix.data.astype(np.float32), matrix.indices.astype(np.int32), matrix.indptr.astype(np.int64)),
        shape=(n_texts, width),
    )
    matrix.sort_indices()
    return matrix


def _split(n_texts: int, known: KnownPostings | None) -> tuple[np.ndarray, np.ndarray]:
    """(texts whose rows are taken, texts to tokenise)."""
    rows = np.full(n_texts, -1, dtype=np.int64) if known is None else np.asarray(known.rows, dtype=np.int64)
    return np.flatnonzero(rows >= 0), np.flatnonzero(rows < 0)


def incidence(texts: Sequence[str], vocabulary: dict[str, int], min_length: int = 2) -> sp.csr_matrix:
    """Binary texts × keywords matrix: the postings of every keyword over ``texts``.

    Rows are not taken from an earlier version here (as :func:`vocabulary_and_incidence` takes a
    chunk's): a text may hold a word no chunk holds whole (a chunk cut inside a long run of
    letters), and once such a word joins the vocabulary, that text's earlier row lacks it."""
    fresh = np.arange(len(texts))
    fresh_ids = [sorted({vocabulary[w] for w in words(t, min_length) if w in vocabulary}) for t in texts]
    taken = sp.csr_matrix((0, len(vocabulary)), dtype=np.float32)
    return _assemble(len(texts), np.zeros(0, dtype=np.int64), taken, fresh, fresh_ids, len(vocabulary))


def vocabulary_and_incidence(
    texts: Sequence[str], min_length: int = 2, known: KnownPostings | None = None
) -> tuple[list[str], sp.csr_matrix]:
    """Every keyword of ``texts`` (sorted, as :func:`build_vocabulary` with method=tokens) and their
    postings (as :func:`incidence`), tokenising each text once instead of twice, and not at all
    where ``known`` holds its row: words get ids in order of first sight, renumbered in sorted
    order at the end."""
    held, fresh = _split(len(texts), known)
    first_seen: dict[str, int] = {}
    fresh_ids = [
        list({first_seen.setdefault(w, len(first_seen)) for w in words(texts[i], min_length)}) for i in fresh.tolist()
    ]
    taken_ids, taken_indptr = np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64)  # in first-sight ids
    if len(held):
        assert known is not None
        rows = known.postings[known.rows[held]]
        used = np.unique(rows.indices)
        code = np.zeros(known.postings.shape[1], dtype=np.int64)
        code[used] = [first_seen.setdefault(known.vocabulary[i], len(first_seen)) for i in used.tolist()]
        taken_ids, taken_indptr = code[rows.indices], rows.indptr
    vocabulary = sorted(first_seen)
    rank = np.empty(len(vocabulary), dtype=np.int64)
    rank[[first_seen[w] for w in vocabulary]] = np.arange(len(vocabulary))
    taken = sp.csr_matrix(
        (np.ones(len(taken_ids), dtype=np.float32), rank[taken_ids], taken_indptr),
        shape=(len(held), len(vocabulary)),
    )
    return vocabulary, _assemble(
        len(texts), held, taken, fresh, [rank[ids].tolist() for ids in fresh_ids], len(vocabulary)
    )


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
