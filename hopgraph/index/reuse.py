"""What an update can take over from the version it edits instead of computing it again.

An update rebuilds the whole index through the pipeline, and its caches make model work free for
texts seen before; but reading hundreds of thousands of cached vectors back one SQLite row at a
time (and tokenising each text again to cut its windows) cost more than the graph arithmetic on a
100k-chunk index. The version being edited already holds those rows in its arrays, keyed by the
text of the table row beside them, so a stage looks its texts up there first and computes (through
the caches) only what is new. A taken row is bitwise the row a rebuild computes from the same
caches: a row is a function of its text alone (a one-window text keeps the model's row whatever
shares its embedding call, see :func:`hopgraph.models.embed_long_texts`), under settings that
must match, by rules whose version (:data:`ROW_RULES`) the edited version must have been built
with; otherwise that source is computed, and the update is then the first to record the rules.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import scipy.sparse as sp

from hopgraph.artifacts import (
    CHUNK_VECTORS,
    CHUNKS,
    CUE_ENTITIES,
    CUE_ENTITY_VECTORS,
    CUE_UNIT_VECTORS,
    CUE_UNITS,
    DOCUMENT_TOKENS,
    DOCUMENTS,
    ENTITIES,
    ENTITY_VECTORS,
    KEYWORD_VECTORS,
    KEYWORDS,
    KNN_LEXICAL_INDICES,
    POSTINGS_CHUNKS,
    POSTINGS_SENTENCES,
    SENTENCE_VECTORS,
    SENTENCES,
    UNIT_VECTORS,
    UNITS,
)
from hopgraph.config import ChunkingConfig, HopgraphConfig
from hopgraph.documents import Document
from hopgraph.index.analysis import sentence_model_key, token_model_key
from hopgraph.index.chunking import Resume, resume_point, searchable, stream_groups
from hopgraph.index.keywords import KnownPostings
from hopgraph.ner import ner_model_key
from hopgraph.store import IndexStore

# Settings that decide an index-time vector: the model and how a text becomes its input (prompt,
# windows, and the tokeniser that cuts the windows).
EMBEDDING = ("embedding.backend", "embedding.model", "embedding.window_tokens", "embedding.passage_prompt")
# ...and the cache: after it moves, an update computes every vector through it once, so a rebuild
# from that cache finds them there instead of embedding them in other batches.
VECTOR_SETTINGS = (*EMBEDDING, "chunking.encoding", "embedding.cache")
# The version of the rules that compute the rows below and what an update keeps of its graphs,
# recorded in each manifest (``row_rules``): bump it when one of them changes (the keyword
# tokeniser and its stop words, the units a chunk's sentences make, the entity table's rules in
# hopgraph/index/entities.py: skipped labels, MAX_COOCCURRING, how titles become entities; the
# concept graph's arithmetic, ...), so no update carries forward rows made by the old rule.
ROW_RULES = 1
SAME_BLOCK = 8192  # rows compared at a time by PreviousVersion.same_rows


def text_models() -> dict[str, str]:
    """What per-text results depend on besides the text where no setting says so (the sentence
    splitter's, spaCy's and the tokeniser's versions, and the noun-phrase rule), recorded in each
    manifest (``text_models``): an update takes sentence units, their names and the cut of
    unchanged documents from a version only where these are the same."""
    return {
        "sentences": sentence_model_key(),
        "names": ner_model_key(),
        "phrases": ner_model_key(phrases=True),
        "tokens": token_model_key(),
    }


def recorded_text_models(manifest: dict[str, Any]) -> dict[str, str] | None:
    """The text models a manifest records. One written before they included the noun-phrase rule
    was made by rule p1, the only one there was then: its phrases key is its names key with p1."""
    models = manifest.get("text_models")
    if models and "names" in models and "phrases" not in models:
        return {**models, "phrases": f"{models['names']}:phrases-p1"}
    return models


# The text models (kinds of :func:`text_models`) each stage's results depend on directly: an update
# takes those results only from a version made by the same models, and a build resumed under
# others makes the stage (and every stage that reads it) again.
STAGE_TEXT_MODELS = {
    "chunks": ("tokens", "sentences"),
    "cue_graph": ("sentences", "names"),
    "entities": ("names", "phrases"),  # the phrase rule counts only with graph.entity_phrases: checked anyway
    "concept_graph": (),
}


def setting(data: dict[str, Any], dotted: str) -> Any:
    """The value at a dotted key of a config dump (``KeyError`` where it has no such key)."""
    for key in dotted.split("."):
        data = data[key]
    return data


@dataclass(frozen=True)
class ByText:
    """Rows of one stored artifact keyed by the text each row was computed from."""

    table: str  # the table whose rows give the keys
    key: Callable[[dict[str, list]], list[str]]  # the text of each of its rows
    key_columns: tuple[str, ...]  # the columns ``key`` reads
    values: str  # an array (or graph) with a row per table row, or (``column``) a column of the table
    column: bool = False
    graph: bool = False  # ``values`` names a graph
    settings: tuple[str, ...] = VECTOR_SETTINGS  # what the values depend on besides the text
    models: tuple[str, ...] = ()  # ...and the text models (kinds of :func:`text_models`)


def _text(table: dict[str, list]) -> list[str]:
    return table["text"]


UNIT_ROWS = ByText(UNITS, searchable, ("heading", "text"), UNIT_VECTORS)
CHUNK_ROWS = ByText(CHUNKS, searchable, ("heading", "text"), CHUNK_VECTORS)
SENTENCE_ROWS = ByText(SENTENCES, _text, ("text",), SENTENCE_VECTORS)
CUE_UNIT_ROWS = ByText(CUE_UNITS, _text, ("text",), CUE_UNIT_VECTORS)
CUE_UNIT_TOKENS = ByText(CUE_UNITS, _text, ("text",), "tokens", column=True, settings=(), models=("tokens",))
CUE_ENTITY_ROWS = ByText(CUE_ENTITIES, lambda table: table["name"], ("name",), CUE_ENTITY_VECTORS)
# A text's keywords depend on the tokeniser's rules (ROW_RULES) and these; tf-idf keeps a text's
# words by their corpus-wide frequency, so its rows are never taken.
KEYWORD_SETTINGS = ("keywords.method", "keywords.min_length")
CHUNK_POSTINGS = ByText(CHUNKS, searchable, ("heading", "text"), POSTINGS_CHUNKS, graph=True, settings=KEYWORD_SETTINGS)
SENTENCE_POSTINGS = ByText(SENTENCES, _text, ("text",), POSTINGS_SENTENCES, graph=True, settings=KEYWORD_SETTINGS)
# A chunk's lexical neighbours (ties to the lower index) also depend on which keywords are too common.
CHUNK_LEXICAL = ByText(
    CHUNKS,
    searchable,
    ("heading", "text"),
    KNN_LEXICAL_INDICES,
    settings=(*KEYWORD_SETTINGS, "keywords.tfidf_top", "keywords.max_df", "keywords.max_postings", "graph.knn_k"),
)
# A keyword's vector is the mean of its sentences' vectors: taken where the keyword's sentences and
# their vectors are bitwise the same (PreviousVersion.unchanged_means), whatever settings made them.
KEYWORD_VECTOR_ROWS = ByText(KEYWORDS, lambda table: table["keyword"], ("keyword",), KEYWORD_VECTORS, settings=())
# An all-zero row of entity_vectors: a name that was not embedded (never taken).
ENTITY_ROWS = ByText(ENTITIES, lambda table: table["display"], ("display",), ENTITY_VECTORS)


@dataclass(frozen=True)
class KeptCut:
    """The pieces of the unchanged leading documents an update keeps from the edited version (the
    leading rows of its chunks, units and sentences tables), and where the cut resumes."""

    resume: Resume
    tables: dict[str, pa.Table]
    document_tokens: np.ndarray  # rows of the documents before ``resume.document``

    def joined(self, name: str, made: pa.Table) -> pa.Table:
        """Table ``name``: the kept rows, then those ``made`` now, in the schema of ``made``."""
        return pa.concat_tables([self.tables[name].cast(made.schema), made]).combine_chunks()


class PreviousVersion:
    """Rows of the complete index an update edits, looked up by text; ``PreviousVersion(None)``
    (:data:`FIRST_BUILD`, a first build) has none and computes everything."""

    def __init__(self, store: IndexStore | None, config: HopgraphConfig | None = None):
        self.store = store
        self.taken = 0  # rows taken over so far
        self._config = config.model_dump() if config is not None else {}
        self._stored: dict[str, Any] = {}
        self._keys: dict[tuple[str, ...], dict[str, list[int]]] = {}
        self._kept: dict[str, pa.Table] = {}  # table → its leading rows the cut kept in place (see cut)
        self._heads: dict[tuple[str, ...], list[str]] = {}  # the texts of those rows, per key columns
        self._text_models: dict[str, str] | None = None
        if store is not None:
            manifest = store.read_manifest() if store.exists() else {}
            if manifest.get("complete") and manifest.get("row_rules") == ROW_RULES:
                self._stored = manifest.get("config", {})
                self._text_models = recorded_text_models(manifest)

    def holding(self, *artifacts: tuple[str, str], stage: str) -> IndexStore | None:
        """The edited version's store where it holds every (folder, name) artifact and made the
        results of ``stage`` with today's text models (:data:`STAGE_TEXT_MODELS`); None elsewhere."""
        if not self._stored or self.store is None or not self._same_models(STAGE_TEXT_MODELS[stage]):
            return None
        return self.store if all(self.store.has(kind, name) for kind, name in artifacts) else None

    def _same_models(self, models: Sequence[str]) -> bool:
        now, then = text_models(), self._text_models or {}
        return all(kind in then and then[kind] == now[kind] for kind in models)

    def _usable(self, source: ByText) -> bool:
        if not self._stored or self.store is None:
            return False
        if not self.store.has("tables", source.table):
            return False
        if source.column:  # a column of that table (an older index may not have it)
            if source.values not in self.store.table_columns(source.table):
                return False
        elif not self.store.has("graphs" if source.graph else "arrays", source.values):
            return False
        return self._same_models(source.models) and self.same_settings(*source.settings)

    def same_settings(self, *settings: str) -> bool:
        """Whether the edited version was made with today's value of every dotted setting."""
        try:
            return all(setting(self._stored, s) == setting(self._config, s) for s in settings)
        except KeyError:  # a setting the edited version's hopgraph did not have
            return False

    def _rows_of(self, source: ByText, start: int = 0) -> dict[str, list[int]]:
        """Text → rows from ``start`` on of the edited version's table holding it, in order; sources
        with the same table and key columns share one lookup."""
        name = (source.table, *source.key_columns, str(start))
        if name not in self._keys:
            assert self.store is not None
            table = self.store.read_arrow(source.table, source.key_columns).slice(start).to_pydict()
            keys: dict[str, list[int]] = {}
            for row, text in enumerate(source.key(table), start):
                keys.setdefault(text, []).append(row)
            self._keys[name] = keys
        return self._keys[name]

    def _in_place(self, source: ByText, texts: Sequence[str]) -> int:
        """How many leading ``texts`` are the rows an update's cut kept in place (:meth:`cut`): the
        same texts at the same rows, matched by position rather than looked up (a lookup table of
        every row costs more than the rest of a stage on a large index)."""
        held = self._kept.get(source.table)
        kept = min(held.num_rows, len(texts)) if held is not None else 0
        if held is not None and kept:
            name = (source.table, *source.key_columns)
            if name not in self._heads:  # read from the rows the cut kept, not from the file again
                self._heads[name] = source.key(held.select(list(source.key_columns)).to_pydict())
            if self._heads[name][:kept] != list(texts[:kept]):  # not this version's rows: look every text up
                return 0
        return kept

    def kept_rows(self, name: str, made: pa.Table) -> int:
        """How many leading rows of ``made`` (columns of this version's table ``name``) are the rows
        the cut kept in place, compared column by column (0 where it kept none of that table)."""
        held = self._kept.get(name)
        if held is None:
            return 0
        kept = min(held.num_rows, made.num_rows)
        for column in made.column_names:
            ours = made[column].slice(0, kept)
            if column not in held.column_names or not held[column].slice(0, kept).cast(ours.type).equals(ours):
                return 0
        return kept

    def in_place(self, source: ByText, texts: Sequence[str]) -> int:
        """How many leading ``texts`` (the rows of this version's table) are rows the cut kept in
        place whose stored ``source`` values hold here too (0 where the version has none to offer)."""
        return self._in_place(source, texts) if texts and self._usable(source) else 0

    def unchanged_means(
        self, source: ByText, keys: Sequence[str], incidence: sp.spmatrix, graph: str, members: str, vectors: np.ndarray
    ) -> np.ndarray | None:
        """For a mean per column of ``incidence`` (the rows of ``vectors`` it holds, stored as
        ``graph`` and ``members``): the edited version's row of ``source`` per key whose column holds
        the same rows there, all of them before the first row of ``vectors`` that differs bitwise from
        the stored one, so the same mean (-1 elsewhere: after a change early in the table that is
        nearly every key); None where that version has none to offer, or means of another width or type."""
        if self.store is None or not keys or not self._usable(source) or not self.store.has("graphs", graph):
            return None
        stored, means = self.store.read_array(members, mmap=True), self.store.read_array(source.values, mmap=True)
        kind = (vectors.dtype, vectors.shape[1:])
        if (stored.dtype, stored.shape[1:]) != kind or (means.dtype, means.shape[1:]) != kind:
            return None  # another model's vectors: every mean is made again
        equal = _equal_leading_rows(vectors, stored)
        old_row = self._rows_of(source)
        rows = np.fromiter((old_row[k][0] if k in old_row else -1 for k in keys), np.int64, len(keys))
        mine = np.flatnonzero(rows >= 0)
        new, old = sp.csc_matrix(incidence), sp.csc_matrix(self.store.read_graph(graph))
        new.sort_indices()
        old.sort_indices()
        if old.shape[1] <= rows.max(initial=-1):  # not the graph those rows were made from
            return None
        lengths = np.diff(new.indptr)[mine]
        same = lengths == np.diff(old.indptr)[rows[mine]]
        mine, lengths = mine[same], lengths[same]
        # Every (new, old) pair of member rows side by side, one segment per column.
        segment = np.repeat(np.arange(len(mine)), lengths)
        offset = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        now = new.indices[np.repeat(new.indptr[mine], lengths) + offset]
        then = old.indices[np.repeat(old.indptr[rows[mine]], lengths) + offset]
        differ = np.bincount(segment[(now != then) | (now >= equal)], minlength=len(mine)) > 0
        taken = np.full(len(keys), -1, dtype=np.int64)
        taken[mine[~differ]] = rows[mine[~differ]]
        return taken

    def taken_rows(self, source: ByText, n: int) -> np.ndarray:
        """The first ``n`` rows of the edited version's ``source`` values (after :meth:`in_place`)."""
        assert self.store is not None
        self.taken += n
        return np.asarray(self.store.read_array(source.values, mmap=True)[:n])

    def _first_rows(self, source: ByText, texts: Sequence[str]) -> np.ndarray:
        """The edited version's first row holding each text (-1 where it holds none)."""
        kept = self._in_place(source, texts)
        keys = self._rows_of(source, kept)
        rest = (keys[t][0] if t in keys else -1 for t in texts[kept:])
        return np.concatenate([np.arange(kept, dtype=np.int64), np.fromiter(rest, np.int64, len(texts) - kept)])

    def rows(self, source: ByText, texts: Sequence[str]) -> np.ndarray | None:
        """The edited version's row per text (-1 where it has none; a text held n times here is
        matched with its first n rows there, in order, so no row is the match of two texts), or None
        where that version has no such rows to offer."""
        if not texts or not self._usable(source):
            return None
        kept = self._in_place(source, texts)
        rows_of = self._rows_of(source, kept)
        seen: dict[str, int] = {}
        rows = np.full(len(texts), -1, dtype=np.int64)
        rows[:kept] = np.arange(kept)
        for i in range(kept, len(texts)):
            text = texts[i]
            matches, nth = rows_of.get(text, ()), seen.get(text, 0)
            if nth < len(matches):
                rows[i] = matches[nth]
            seen[text] = nth + 1
        return rows

    def same_rows(self, source: ByText, texts: Sequence[str], values: np.ndarray) -> np.ndarray | None:
        """The edited version's row per text whose stored value is bitwise the row of ``values``
        beside it (-1 where none is; never one row for two texts), or None where that version has
        no such rows to offer."""
        rows = self.rows(source, texts)
        if rows is None:
            return None
        assert self.store is not None
        stored = self.store.read_array(source.values, mmap=True)
        if stored.dtype != values.dtype or stored.shape[1:] != values.shape[1:]:
            return np.full(len(texts), -1, dtype=np.int64)
        held = np.flatnonzero(rows >= 0)
        for start in range(0, len(held), SAME_BLOCK):  # in blocks: whole, the copies cost more than the test
            part = held[start : start + SAME_BLOCK]
            rows[part[~_same_bits(stored[rows[part]], values[part])]] = -1
        return rows

    def postings(self, source: ByText, texts: Sequence[str]) -> KnownPostings | None:
        """The edited version's keyword postings of the ``texts`` it holds, with its vocabulary (None
        where it has none to offer, or its keywords are tf-idf's)."""
        if not texts or not self._usable(source) or setting(self._config, "keywords.method") != "tokens":
            return None
        assert self.store is not None
        rows = self._first_rows(source, texts)
        if not (rows >= 0).any() or not self.store.has("tables", KEYWORDS):
            return None
        self.taken += int((rows >= 0).sum())
        vocabulary = self.store.read_table(KEYWORDS, ["keyword"])["keyword"]
        return KnownPostings(vocabulary, self.store.read_graph(source.values), rows)

    def cut(self, documents: Sequence[Document], chunking: ChunkingConfig) -> KeptCut | None:
        """The edited version's pieces of the leading ``documents`` it holds unchanged (same id,
        title, text and ACL), with where the cut of the rest resumes; None where it has none to
        offer (no such documents or chunks, other chunking settings, tokeniser or sentence splitter)."""
        tables = [("tables", name) for name in (DOCUMENTS, CHUNKS, UNITS, SENTENCES)]
        store = self.holding(*tables, ("arrays", DOCUMENT_TOKENS), stage="chunks")
        try:
            if store is None or setting(self._stored, "chunking") != setting(self._config, "chunking"):
                return None
        except KeyError:  # no chunking settings to compare (a version made without a config)
            return None
        old = store.read_table(DOCUMENTS, ["id", "title", "text", "acl"])
        unchanged = 0
        for doc, *held in zip(documents, old["id"], old["title"], old["text"], old["acl"]):
            if [doc.id, doc.title, doc.text, doc.acl] != held:
                break
            unchanged += 1
        if not unchanged:
            return None
        chunks, units = store.read_arrow(CHUNKS), store.read_arrow(UNITS)
        if not chunks.num_rows:  # nothing to keep (and no typed columns to read positions from)
            return None
        sentences = store.read_arrow(SENTENCES)
        document_tokens = store.read_array(DOCUMENT_TOKENS)
        resume = resume_point(
            unchanged,
            list(stream_groups(documents[:unchanged], chunking.pack_documents))[-1][0],
            document_tokens,
            chunk_start=chunks["token_start"].to_numpy(),
            chunk_document=pc.list_element(chunks["docs"], 0).to_numpy(),
            unit_start=units["token_start"].to_numpy(),
            unit_chunk=units["chunk"].to_numpy(),
            sentence_document=sentences["doc"].to_numpy(),
            size=chunking.size,
        )
        self.taken += resume.chunks + resume.units + resume.sentences
        self._kept = {
            CHUNKS: chunks.slice(0, resume.chunks),
            UNITS: units.slice(0, resume.units),
            SENTENCES: sentences.slice(0, resume.sentences),
        }
        self._heads = {}
        return KeptCut(resume, self._kept, document_tokens[: resume.document])

    def table(self, name: str, columns: Sequence[str]) -> dict[str, list] | None:
        """Columns of a table of the edited version, or None where it has no such table."""
        if not self._stored or self.store is None or not self.store.has("tables", name):
            return None
        return self.store.read_table(name, columns)

    def array(self, name: str) -> np.ndarray | None:
        """An array of the edited version (memory-mapped), or None where it has none."""
        if not self._stored or self.store is None or not self.store.has("arrays", name):
            return None
        return self.store.read_array(name, mmap=True)

    def take(
        self,
        source: ByText,
        texts: Sequence[str],
        compute: Callable[[list[str]], Any],
        rows: np.ndarray | None = None,
    ) -> np.ndarray:
        """The value per text: the edited version's row where it holds the text, ``compute`` (called
        once, on the rest in order) elsewhere. A caller that knows which of its rows hold the texts
        passes them as ``rows`` (-1: compute), and no text is looked up."""
        if not texts or not self._usable(source):
            return np.asarray(compute(list(texts)))
        assert self.store is not None
        if rows is None:
            rows = self._first_rows(source, texts)  # a repeated text takes its first row
        else:
            rows = np.array(rows, dtype=np.int64)
        values = (
            np.asarray(self.store.read_table(source.table, [source.values])[source.values])
            if source.column
            else self.store.read_array(source.values, mmap=True)
        )
        if len(values) == 0:  # nothing stored (no rows, or an empty (0, 0) array): nothing to take
            return np.asarray(compute(list(texts)))
        # Zeros, not np.empty: rows left to compute are read by the all-zero test below, and reused
        # memory can hold signalling NaNs there ("invalid value encountered in reduce" on every update).
        out = np.zeros((len(texts), *values.shape[1:]), dtype=values.dtype)
        # Rows kept in place (text i at row i) are one slice of the (memory-mapped) array, copied
        # once; the rest is one gather.
        moved = np.flatnonzero(rows != np.arange(len(rows)))
        in_place = int(moved[0]) if len(moved) else len(rows)
        out[:in_place] = values[:in_place]
        elsewhere = in_place + np.flatnonzero(rows[in_place:] >= 0)
        out[elsewhere] = values[rows[elsewhere]]
        held = rows >= 0
        if values.ndim == 2:  # an all-zero row holds no vector (nothing was embedded)
            held &= out.any(axis=1)  # rows not filled are zeros, and not held anyway
        fresh = np.flatnonzero(~held)
        if len(fresh):
            out[fresh] = np.asarray(compute([texts[i] for i in fresh.tolist()]))
        self.taken += len(rows) - len(fresh)
        return out


def _same_bits(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per row of two arrays of one dtype and shape: bitwise the same (-0.0 is not 0.0, a NaN is itself)."""
    bits = np.dtype(f"u{x.dtype.itemsize}")
    return (np.ascontiguousarray(x).view(bits) == np.ascontiguousarray(y).view(bits)).reshape(len(x), -1).all(axis=1)


def _equal_leading_rows(a: np.ndarray, b: np.ndarray) -> int:
    """How many leading rows ``a`` and ``b`` (of one dtype and row shape) have bitwise alike,
    compared a block at a time."""
    n = min(len(a), len(b))
    for start in range(0, n, SAME_BLOCK):
        stop = min(start + SAME_BLOCK, n)
        differ = np.flatnonzero(~_same_bits(a[start:stop], b[start:stop]))
        if len(differ):
            return start + int(differ[0])
    return n


FIRST_BUILD = PreviousVersion(None)  # nothing to take (it never takes, so it is shared)
