"""The entity layer, built without an LLM: named entities, noun phrases and document titles linked to sub-chunks.

Keywords are single words, so a multi-word name ("Ermengarde of Tours") never becomes one node and
nothing ties a passage to the entity it names. Here every sub-chunk is linked to the spaCy named
entities of its sentences (NER results cached per sentence, the same cache CUE-RAG uses), optionally
their noun phrases, and to the titles of its documents (a titled paragraph is about its title,
whether or not the text repeats it). Names are canonical through :func:`hopgraph.text.normalise_entity`;
names whose embeddings are close get synonym edges (top-k per name, never all pairs), as HippoRAG 2
links its LLM-extracted phrases, and names said in one sentence get co-occurrence edges, the LLM-free
stand-in for the relation an LLM would extract between them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from hopgraph.artifacts import (
    ENTITIES,
    ENTITY_MENTIONS,
    ENTITY_SENTENCES,
    ENTITY_SYNONYM_INDICES,
    ENTITY_SYNONYM_SCORES,
    ENTITY_SYNONYMS,
    ENTITY_VECTORS,
)
from hopgraph.index.graphs import nearest_others, patched_cosine_candidates
from hopgraph.index.reuse import ENTITY_ROWS, FIRST_BUILD, PreviousVersion
from hopgraph.kernels import cooccurrence_matrix, normalize_rows
from hopgraph.ner import NameFinder
from hopgraph.store import IndexStore
from hopgraph.text import normalise_entity

# Numbers, amounts and dates name no thing to bridge through: "one" or "1990" would join unrelated passages.
SKIPPED_LABELS = frozenset({"CARDINAL", "ORDINAL", "QUANTITY", "PERCENT", "MONEY", "TIME", "DATE"})
TITLE = "TITLE"
# A sentence naming more entities than this links none of them to each other: a list sentence (a
# cast, a table row) would add a clique of edges that say nothing about any pair.
MAX_COOCCURRING = 12


@dataclass(frozen=True)
class EntityTable:
    """The entities of an index and where they are named."""

    mentions: sp.csr_matrix  # units × entities, 1 where the unit names the entity
    sentence_mentions: sp.csr_matrix  # sentences × entities, for sentences naming 2..MAX_COOCCURRING
    names: list[str]  # normalised
    labels: list[str]  # spaCy's, PHRASE, or TITLE
    display: list[str]


def _binary(rows: list[int], columns: list[int], shape: tuple[int, int]) -> sp.csr_matrix:
    matrix = sp.csr_matrix(
        (np.ones(len(rows), dtype=np.float32), (np.asarray(rows, dtype=np.int64), np.asarray(columns, dtype=np.int64))),
        shape=shape,
    )
    matrix.data[:] = 1.0  # a name said twice in one place is still one mention
    return matrix


def unit_entities(
    sentence_units: Sequence[int],
    sentence_names: Sequence[Sequence[Sequence[str]]],
    unit_docs: Sequence[Sequence[int]],
    titles: Sequence[str],
) -> EntityTable:
    """The entities of per-sentence names and of document titles, their mentions and co-occurrences.

    An entity's label is the first one seen (a title wins: it names the document it heads); its
    display form is the title as written where there is one, else the normalised name.
    """
    ids: dict[str, int] = {}
    labels: list[str] = []
    display: list[str] = []

    def entity(name: str, label: str, shown: str) -> int:
        if name not in ids:
            ids[name] = len(ids)
            labels.append(label)
            display.append(shown)
        return ids[name]

    rows: list[int] = []
    columns: list[int] = []
    said_in: list[int] = []  # sentence per (sentence, entity) pair, for co-occurrence
    said: list[int] = []
    title_ids = [entity(normalise_entity(t), TITLE, t.strip()) if normalise_entity(t) else -1 for t in titles]
    for unit, docs in enumerate(unit_docs):
        for d in docs:
            if title_ids[d] >= 0:
                rows.append(unit)
                columns.append(title_ids[d])
    for sentence, (unit, names) in enumerate(zip(sentence_units, sentence_names)):
        named = [entity(name, label, name) for name, label in names if label not in SKIPPED_LABELS]
        rows.extend([unit] * len(named))
        columns.extend(named)
        if 2 <= len(named) <= MAX_COOCCURRING:
            said_in.extend([sentence] * len(named))
            said.extend(named)
    mentions = _binary(rows, columns, (len(unit_docs), len(ids)))
    return EntityTable(mentions, _binary(said_in, said, (len(sentence_units), len(ids))), list(ids), labels, display)


def synonym_candidates(vectors: np.ndarray, k: int, exact_limit: int) -> tuple[np.ndarray, np.ndarray]:
    """(scores, indices) of each name's k nearest other names by cosine, best first (-1: none found).

    Up to ``exact_limit`` names (``graph.exact_synonym_limit``) the search is exact; above it FAISS
    inverted lists find them, as for the KNN graph: all pairs grow with the square of the corpus,
    and names at synonym similarity share a list all but always (``scripts/bench_synonyms.py``:
    every exact edge found among 17k names).
    """
    return nearest_others(vectors, max(0, min(k, len(vectors) - 1)), exact_limit=exact_limit)


def synonym_graph(scores: np.ndarray, neighbours: np.ndarray, threshold: float) -> sp.csr_matrix:
    """Symmetric name × name graph weighted by cosine, for the candidates at ≥ threshold."""
    n = len(scores)
    keep = (scores >= threshold) & (neighbours >= 0)
    rows = np.repeat(np.arange(n), keep.sum(axis=1))
    edges = sp.csr_matrix((scores[keep].astype(np.float32), (rows, neighbours[keep])), shape=(n, n))
    return edges.maximum(edges.T).tocsr()


def synonym_edges(vectors: np.ndarray, threshold: float, k: int, exact_limit: int) -> sp.csr_matrix:
    """Symmetric entity × entity graph weighted by name cosine, for each name's k nearest at ≥ threshold."""
    return synonym_graph(*synonym_candidates(vectors, k, exact_limit), threshold)


def _embedded_rows(vectors: np.ndarray, block: int = 65536) -> np.ndarray:
    """Rows of an entity_vectors array that hold a vector (the others are zero: names not embedded)."""
    held = [np.flatnonzero(np.asarray(vectors[a : a + block]).any(axis=1)) + a for a in range(0, len(vectors), block)]
    return np.concatenate(held) if held else np.zeros(0, dtype=np.int64)


def patched_synonym_candidates(
    previous: PreviousVersion, names: list[str], vectors: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray, int] | None:
    """The synonym candidates of the version an update edits, patched to its embedded ``names``
    (:func:`hopgraph.index.graphs.patched_cosine_candidates`): (scores, indices, names searched
    again), or None where that version has none to patch or a fresh search costs as little."""
    old_scores, old_indices = previous.array(ENTITY_SYNONYM_SCORES), previous.array(ENTITY_SYNONYM_INDICES)
    old_vectors = previous.array(ENTITY_VECTORS)
    if old_scores is None or old_indices is None or old_vectors is None:
        return None
    width = max(0, min(k, len(vectors) - 1))
    old_embedded = _embedded_rows(old_vectors)
    if old_indices.shape != (len(old_embedded), width) or width == 0:
        return None
    rows = previous.same_rows(ENTITY_ROWS, names, vectors)  # the edited version's entity rows
    if rows is None:
        return None
    position = np.full(len(old_vectors), -1, dtype=np.int64)  # entity row -> place among its embedded names
    position[old_embedded] = np.arange(len(old_embedded))
    same_as = np.where(rows >= 0, position[np.maximum(rows, 0)], -1)
    return patched_cosine_candidates(vectors, same_as, old_scores, old_indices)


def _spread(graph: sp.csr_matrix, rows: np.ndarray, n: int) -> sp.csr_matrix:
    """``graph`` over the entities ``rows``, as an n × n graph over all entities."""
    coo = graph.tocoo()
    return sp.csr_matrix((coo.data, (rows[coo.row], rows[coo.col])), shape=(n, n))


def write_entity_layer(
    store: IndexStore,
    embed: Callable[[list[str]], np.ndarray],
    find_names: NameFinder,
    *,
    synonym_threshold: float,
    synonym_k: int,
    exact_limit: int,
    previous: PreviousVersion = FIRST_BUILD,
) -> dict[str, int]:
    """Build and store the entity artifacts of the index in ``store`` (its sentences, units and documents);
    name vectors the version an update edits holds (``previous``) are taken from it."""
    sentences = store.read_table("sentences", ["text", "unit"])
    table = unit_entities(
        sentences["unit"],
        find_names(sentences["text"]),
        store.read_table("units", ["docs"])["docs"],
        store.read_table("documents", ["title"])["title"],
    )
    mentions, names, labels, display = table.mentions, table.names, table.labels, table.display
    # Only a title or a name found in two sub-chunks or more gets a vector (the rest are zero rows): a
    # name in one passage adds nothing to what that passage's own vector finds, and embedding every
    # one (about five of six names) cost as much as embedding the sentences.
    embedded = np.flatnonzero((mentions.getnnz(axis=0) >= 2) | (np.asarray(labels) == TITLE))
    vectors = np.zeros((len(names), store.read_array("unit_vectors", mmap=True).shape[1]), np.float32)
    names_embedded = [display[e] for e in embedded]
    if len(embedded):
        vectors[embedded] = previous.take(
            ENTITY_ROWS, names_embedded, lambda texts: normalize_rows(np.asarray(embed(texts), np.float32))
        )
    # Above the exact limit an update searches again only the names it touched (a fresh FAISS search
    # cost ~2 s at 100k chunks whatever the change), as the KNN graph's cosine candidates do.
    patched = (
        patched_synonym_candidates(previous, names_embedded, vectors[embedded], synonym_k)
        if len(embedded) > exact_limit
        else None
    )
    if patched is None:
        scores, neighbours = synonym_candidates(vectors[embedded], synonym_k, exact_limit)
    else:
        scores, neighbours, searched = patched
        previous.taken += len(embedded) - searched
    synonyms = _spread(synonym_graph(scores, neighbours, synonym_threshold), embedded, len(names))
    store.write_table(ENTITIES, {"name": names, "label": labels, "display": display})
    store.write_graph(ENTITY_MENTIONS, mentions)
    store.write_array(ENTITY_VECTORS, vectors)
    store.write_graph(ENTITY_SYNONYMS, synonyms)
    store.write_array(ENTITY_SYNONYM_SCORES, np.asarray(scores, dtype=np.float32))
    store.write_array(ENTITY_SYNONYM_INDICES, np.asarray(neighbours, dtype=np.int64))
    store.write_graph(ENTITY_SENTENCES, table.sentence_mentions)
    return {
        "entities": len(names),
        "entity_mentions": int(mentions.nnz),
        "entity_synonyms": int(synonyms.nnz // 2),
        "entity_cooccurrences": int(cooccurrence_matrix(table.sentence_mentions.T.tocsr()).nnz // 2),
        "entity_vectors": len(embedded),
    }
