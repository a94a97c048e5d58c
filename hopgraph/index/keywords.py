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
    matrix = found  # with no row taken (a first build), ``fresh`` is every text in order
    if len(held):
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


# Above this many keywords new to the vocabulary, the texts whose rows could be taken are counted
# again instead: looking for each new word in them would cost about as much.
MAX_GAINED = 1000


def _holding_any(texts: Sequence[str], held: np.ndarray, gained: Sequence[str]) -> np.ndarray:
    """Per text of ``held``, whether its lower-cased text holds one of ``gained`` anywhere: a
    superset of those whose keywords include one (a word is a run of its lower-cased text)."""
    hit = np.zeros(len(held), dtype=bool)
    if not gained or not len(held):
        return hit
    if len(gained) > MAX_GAINED:
        return ~hit
    lowered = [texts[i].lower() for i in held.tolist()]
    joined = "\0".join(lowered)  # no word holds the separator
    starts = np.cumsum([0] + [len(t) + 1 for t in lowered[:-1]])
    for word in gained:
        at = joined.find(word)
        while at >= 0:
            k = int(np.searchsorted(starts, at, side="right")) - 1
            hit[k] = True
            at = joined.find(word, int(starts[k + 1])) if k + 1 < len(starts) else -1  # on to the next text
    return hit


def incidence(
    texts: Sequence[str], vocabulary: dict[str, int], min_length: int = 2, known: KnownPostings | None = None
) -> sp.csr_matrix:
    """Binary texts × keywords matrix: the postings of every keyword over ``texts``.

    The row of a text ``known`` holds is taken (less the keywords ``vocabulary`` has lost) unless the
    text holds a keyword that earlier vocabulary lacked: a sentence may hold whole a word no chunk
    held whole (a chunk cut inside a long run of letters), and once that word joins the vocabulary
    the earlier row lacks it. Such texts are counted again."""
    held, fresh = _split(len(texts), known)
    taken = sp.csr_matrix((0, len(vocabulary)), dtype=np.float32)
    if len(held):
        assert known is not None
        before = set(known.vocabulary)
        again = _holding_any(texts, held, [w for w in vocabulary if w not in before])
        held, fresh = held[~again], np.sort(np.concatenate([fresh, held[again]]))
        rows = known.postings[known.rows[held]]
        column = np.fromiter(
            (vocabulary.get(w, -1) for w in known.vocabulary), dtype=np.int64, count=len(known.vocabulary)
        )
        lost = column[rows.indices] < 0
        rows = sp.csr_matrix(
            (np.where(lost, 0, rows.data).astype(np.float32), np.maximum(column[rows.indices], 0), rows.indptr),
            shape=(len(held), len(vocabulary)),
        )
        rows.eliminate_zeros()
        taken = rows
    fresh_ids = [
        sorted({vocabulary[w] for w in words(texts[i], min_length) if w in vocabulary}) for i in fresh.tolist()
    ]
    return _assemble(len(texts), held, taken, fresh, fresh_ids, len(vocabulary))


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
