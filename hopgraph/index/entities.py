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
import pyarrow as pa
import scipy.sparse as sp

from hopgraph.artifacts import (
    DOCUMENTS,
    ENTITIES,
    ENTITY_MENTIONS,
    ENTITY_SENTENCES,
    ENTITY_SYNONYM_INDICES,
    ENTITY_SYNONYM_SCORES,
    ENTITY_SYNONYMS,
    ENTITY_VECTORS,
    SENTENCES,
    UNITS,
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


def _binary(rows: np.ndarray | list[int], columns: np.ndarray | list[int], shape: tuple[int, int]) -> sp.csr_matrix:
    matrix = sp.csr_matrix(
        (np.ones(len(rows), dtype=np.float32), (np.asarray(rows, dtype=np.int64), np.asarray(columns, dtype=np.int64))),
        shape=shape,
    )
    matrix.data[:] = 1.0  # a name said twice in one place is still one mention
    return matrix


@dataclass(frozen=True)
class KeptEntities:
    """The entity table of the version an update edits, over the leading sub-chunks and sentences the
    update keeps (``units`` and ``sentences`` of them: no sentence after the kept ones, here or there,
    lies in a kept sub-chunk; a kept sub-chunk may hold no sentence at all, only its titles).

    Entities are numbered in the order a build first meets them: document titles, then the names of
    sentences in order. So the edited version's first ``titles`` entities are its titles, and those
    first named by a kept sentence follow them in the same order (``names`` ends there): an update
    that appends documents keeps both blocks and meets only its new titles and sentences' names.
    """

    names: list[str]
    labels: list[str]
    display: list[str]
    titles: int
    units: int
    sentences: int
    mentions: sp.coo_matrix  # the kept sub-chunks' rows, in the edited version's entity numbers
    sentence_mentions: sp.coo_matrix  # the kept sentences' rows, likewise


def kept_entities(
    previous: PreviousVersion, sentences: pa.Table, units: pa.Table, titles: Sequence[str]
) -> KeptEntities | None:
    """The part of the edited version's entity table an update keeps (``sentences``: this version's
    text and unit columns, ``units``: its docs column), or None where it keeps none: the cut kept no
    sentence, that version's titles are not the leading ones here, or its entities were found by
    other rules (spaCy model, noun-phrase rule, ``graph.entity_phrases``). Which sentences and
    sub-chunks are kept is the cut's to say (:meth:`PreviousVersion.kept_rows`); a kept sub-chunk
    whose every sentence lies beyond the kept ones leaves the block with only the titles."""
    store = previous.holding(
        ("tables", ENTITIES), ("graphs", ENTITY_MENTIONS), ("graphs", ENTITY_SENTENCES), stage="entities"
    )
    if store is None or not previous.same_settings("graph.entity_phrases"):
        return None
    kept_units, kept_sentences = previous.kept_rows(UNITS, units), previous.kept_rows(SENTENCES, sentences)
    old_titles = store.read_table(DOCUMENTS, ["title"])["title"]
    if not kept_sentences or list(titles[: len(old_titles)]) != old_titles:
        return None
    unit_of = sentences["unit"].to_numpy()
    old_unit_of = store.read_arrow(SENTENCES, ["unit"])["unit"].to_numpy()
    if len(unit_of) and (np.diff(unit_of[:kept_sentences]) < 0).any():
        return None  # sentences out of sub-chunk order: no kept block to speak of
    # A kept sub-chunk must hold kept sentences only, here and in the edited version (a re-cut
    # document's first sentence may begin in the last kept sub-chunk).
    for after in (unit_of[kept_sentences:], old_unit_of[kept_sentences:]):
        kept_units = min(kept_units, int(after.min(initial=kept_units)))
    kept_sentences = int(np.searchsorted(unit_of[:kept_sentences], kept_units))
    entities = store.read_table(ENTITIES, ["name", "label", "display"])
    mentions, said = store.read_graph(ENTITY_MENTIONS), store.read_graph(ENTITY_SENTENCES)
    n_titles = sum(label == TITLE for label in entities["label"])
    title_names = list(dict.fromkeys(n for n in map(normalise_entity, old_titles) if n))
    if entities["name"][:n_titles] != title_names or mentions.shape[1] != len(entities["name"]):
        return None
    # An entity after the titles is kept when a kept sub-chunk names it; those form one leading block.
    first_unit = np.full(mentions.shape[1], mentions.shape[0], dtype=np.int64)
    coo = mentions.tocoo()
    np.minimum.at(first_unit, coo.col, coo.row)
    kept = first_unit[n_titles:] < kept_units
    n_kept = n_titles + int(kept.sum())
    if kept[: n_kept - n_titles].sum() != n_kept - n_titles:
        return None
    previous.taken += kept_sentences
    return KeptEntities(
        entities["name"][:n_kept],
        entities["label"][:n_kept],
        entities["display"][:n_kept],
        n_titles,
        kept_units,
        kept_sentences,
        mentions[:kept_units].tocoo(),
        said[:kept_sentences].tocoo(),
    )


def unit_entities(
    sentence_units: Sequence[int],
    sentence_names: Sequence[Sequence[Sequence[str]]],
    unit_docs: Sequence[Sequence[int]],
    titles: Sequence[str],
    kept: KeptEntities | None = None,
) -> EntityTable:
    """The entities of per-sentence names and of document titles, their mentions and co-occurrences;
    with ``kept``, ``sentence_names`` are those of the sentences after the kept ones only, while
    ``sentence_units`` and ``unit_docs`` still cover every sentence and sub-chunk.

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

    # With ``kept``, its titles are the leading ones here: they are numbered as they were.
    title_ids = [entity(normalise_entity(t), TITLE, t.strip()) if normalise_entity(t) else -1 for t in titles]
    rows: list[int] = []
    columns: list[int] = []
    said_in: list[int] = []  # sentence per (sentence, entity) pair, for co-occurrence
    said: list[int] = []
    first_unit = first_sentence = 0
    if kept is not None:  # the kept block after the titles, less names that are new titles now
        number = np.arange(len(kept.names), dtype=np.int64)
        for old in range(kept.titles, len(kept.names)):
            number[old] = entity(kept.names[old], kept.labels[old], kept.display[old])
        first_unit, first_sentence = kept.units, kept.sentences
        rows, columns = kept.mentions.row.tolist(), number[kept.mentions.col].tolist()
        said_in, said = kept.sentence_mentions.row.tolist(), number[kept.sentence_mentions.col].tolist()
    for unit in range(first_unit, len(unit_docs)):
        for d in unit_docs[unit]:
            if title_ids[d] >= 0:
                rows.append(unit)
                columns.append(title_ids[d])
    for sentence, (unit, names) in enumerate(zip(sentence_units[first_sentence:], sentence_names), first_sentence):
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
    sentences, units = store.read_arrow(SENTENCES, ["text", "unit"]), store.read_arrow(UNITS, ["docs"])
    titles = store.read_table(DOCUMENTS, ["title"])["title"]
    kept = kept_entities(previous, sentences, units, titles)
    texts = sentences["text"].slice(kept.sentences if kept else 0).to_pylist()
    unit_docs = units["docs"].to_pylist()
    table = unit_entities(sentences["unit"].to_pylist(), find_names(texts), unit_docs, titles, kept)
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
