"""The pipeline stages that build the text layers and their vectors: documents, chunks, sub-chunks
and sentences, keywords and their postings, and the sub-chunk, chunk, sentence and keyword vectors.

Each reads what earlier stages stored and writes its own tables and arrays; an update takes the
rows of the version it edits where their texts are unchanged (:mod:`hopgraph.index.reuse`).
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hopgraph.artifacts import CHUNKS, DOCUMENT_TOKENS, KEYWORDS, POSTINGS_SENTENCES, SENTENCE_VECTORS, SENTENCES, UNITS
from hopgraph.index import keywords
from hopgraph.index.chunking import build_layers, headings, searchable
from hopgraph.index.context import BuildContext
from hopgraph.index.reuse import (
    CHUNK_POSTINGS,
    CHUNK_ROWS,
    KEYWORD_VECTOR_ROWS,
    SENTENCE_POSTINGS,
    SENTENCE_ROWS,
    UNIT_ROWS,
)
from hopgraph.kernels import group_mean_vectors, mean_vectors


def stage_documents(ctx: BuildContext) -> dict[str, int]:
    docs = ctx.documents
    ctx.store.write_table(
        "documents",
        {
            "id": [d.id for d in docs],
            "title": [d.title for d in docs],
            "source": [d.source for d in docs],
            "text": [d.text for d in docs],
            "metadata": [json.dumps(d.metadata, sort_keys=True, default=str) for d in docs],
            "acl": [d.acl for d in docs],
        },
    )
    return {"documents": len(docs)}


_TEXT, _INTS = ("text", pa.string()), pa.list_(pa.int64())
# One schema however a table was made (an update's kept rows read back from Parquet, or made now).
PIECE_SCHEMAS = {
    CHUNKS: pa.schema(
        [
            _TEXT,
            ("heading", pa.string()),
            ("tokens", pa.int64()),
            ("docs", _INTS),
            ("starts", _INTS),
            ("acl", pa.list_(pa.string())),
            ("token_start", pa.int64()),
        ]
    ),
    UNITS: pa.schema(
        [
            _TEXT,
            ("heading", pa.string()),
            ("tokens", pa.int64()),
            ("docs", _INTS),
            ("chunk", pa.int64()),
            ("starts", _INTS),
            ("token_start", pa.int64()),
        ]
    ),
    SENTENCES: pa.schema([_TEXT, ("tokens", pa.int64()), ("doc", pa.int64()), ("unit", pa.int64())]),
}


def stage_chunks(ctx: BuildContext) -> dict[str, int]:
    """Chunks, sub-chunks and sentences; an update keeps those of the unchanged leading documents
    and cuts only from where they stop deciding the cut (:func:`~hopgraph.index.chunking.resume_point`)."""
    cfg = ctx.config.chunking
    kept = ctx.previous.cut(ctx.documents, cfg)
    layers = build_layers(ctx.documents, cfg, ctx.analyser.analyse, kept.resume if kept else None)
    rows: dict[str, dict[str, list]] = {
        CHUNKS: {
            "text": layers.chunks.text,
            "heading": headings(layers.chunks.docs, layers.chunks.text, ctx.documents),
            "tokens": layers.chunks.tokens,
            "docs": layers.chunks.docs,
            "starts": layers.chunks.starts,
            "acl": [ctx.documents[d[0]].acl if d else None for d in layers.chunks.docs],
            "token_start": layers.chunks.token_start,
        },
        UNITS: {
            "text": layers.units.text,
            "heading": headings(layers.units.docs, layers.units.text, ctx.documents),
            "tokens": layers.units.tokens,
            "docs": layers.units.docs,
            "chunk": layers.units.parent,
            "starts": layers.units.starts,
            "token_start": layers.units.token_start,
        },
        SENTENCES: {
            "text": layers.sentences.text,
            "tokens": layers.sentences.tokens,
            "doc": [d[0] for d in layers.sentences.docs],
            "unit": layers.sentences.parent,
        },
    }
    made = {name: pa.table(columns, schema=PIECE_SCHEMAS[name]) for name, columns in rows.items()}
    tables = {name: kept.joined(name, table) if kept else table for name, table in made.items()}
    for name, table in tables.items():
        ctx.store.write_table(name, table)
    document_tokens = np.asarray(layers.document_tokens, dtype=np.int64).reshape(-1, 2)
    if kept:
        document_tokens = np.concatenate([kept.document_tokens, document_tokens])
    ctx.store.write_array(DOCUMENT_TOKENS, document_tokens)
    return {
        "chunks": tables[CHUNKS].num_rows,
        "units": tables[UNITS].num_rows,
        "sentences": tables[SENTENCES].num_rows,
        "tokens": int(pc.sum(tables[CHUNKS]["tokens"]).as_py() or 0),
    }


def stage_keywords(ctx: BuildContext) -> dict[str, int]:
    cfg = ctx.config.keywords
    chunks = searchable(ctx.store.read_table("chunks", ["heading", "text"]))
    if cfg.method == "tokens":  # the vocabulary is every chunk word: one pass over the chunks gives both
        known = ctx.previous.postings(CHUNK_POSTINGS, chunks)
        vocabulary, chunk_postings = keywords.vocabulary_and_incidence(chunks, cfg.min_length, known)
        lookup = {w: i for i, w in enumerate(vocabulary)}
    else:
        vocabulary = keywords.build_vocabulary(chunks, cfg)
        lookup = {w: i for i, w in enumerate(vocabulary)}
        chunk_postings = keywords.incidence(chunks, lookup, cfg.min_length)
    ctx.store.write_graph("postings_chunks", chunk_postings)
    units = searchable(ctx.store.read_table("units", ["heading", "text"]))
    same = units == chunks  # one sub-chunk per chunk (τ=0): the same texts have the same postings
    ctx.store.write_graph(
        "postings_units", chunk_postings if same else keywords.incidence(units, lookup, cfg.min_length)
    )
    sentences = ctx.store.read_table("sentences", ["text"])["text"]
    known = ctx.previous.postings(SENTENCE_POSTINGS, sentences)
    ctx.store.write_graph("postings_sentences", keywords.incidence(sentences, lookup, cfg.min_length, known))
    chunk_df = np.asarray(chunk_postings.sum(axis=0)).ravel().astype(np.int64)
    ctx.store.write_table("keywords", {"keyword": vocabulary, "chunk_df": chunk_df})
    return {"keywords": len(vocabulary)}


def stage_embed_units(ctx: BuildContext) -> dict[str, int]:
    """Sub-chunk vectors; a chunk's vector is the mean of its sub-chunks' (no truncation)."""
    units = ctx.store.read_table("units", ["heading", "text", "tokens", "chunk"])
    vectors = ctx.previous.take(UNIT_ROWS, searchable(units), ctx.embed)
    ctx.store.write_array("unit_vectors", vectors)
    chunks = searchable(ctx.store.read_table(CHUNKS, ["heading", "text"]))
    kept = ctx.previous.in_place(CHUNK_ROWS, chunks)  # same sub-chunks, so the same mean
    chunk_vectors = group_mean_vectors(vectors, units["chunk"], len(chunks), first=kept)
    if kept:
        chunk_vectors = np.concatenate([ctx.previous.taken_rows(CHUNK_ROWS, kept), chunk_vectors])
    ctx.store.write_array("chunk_vectors", chunk_vectors)
    return {"embedded_texts": len(units["text"]), "embedding_tokens": int(sum(units["tokens"]))}


def stage_embed_sentences(ctx: BuildContext) -> dict[str, int]:
    sentences = ctx.store.read_table("sentences", ["text", "tokens"])
    ctx.store.write_array("sentence_vectors", ctx.previous.take(SENTENCE_ROWS, sentences["text"], ctx.embed))
    return {"embedded_sentences": len(sentences["text"]), "embedding_tokens": int(sum(sentences["tokens"]))}


def stage_keyword_vectors(ctx: BuildContext) -> dict[str, int]:
    """A keyword's vector: the mean of its sentences'. An update takes the edited version's where the
    keyword's sentences are the same rows with bitwise the same vectors, all before the first
    sentence whose vector changed (after an insert at the end: every keyword its text lacks), and
    sums the rest; where most must be summed again (a change early in the table), it sums all."""
    postings = ctx.store.read_graph(POSTINGS_SENTENCES)
    sentence_vectors = ctx.store.read_array(SENTENCE_VECTORS, mmap=True)
    vocabulary = ctx.store.read_table(KEYWORDS, ["keyword"])["keyword"]
    column = {keyword: i for i, keyword in enumerate(vocabulary)}

    def compute(keywords: list[str]) -> np.ndarray:
        return mean_vectors(postings, sentence_vectors, columns=[column[k] for k in keywords])

    rows = ctx.previous.unchanged_means(
        KEYWORD_VECTOR_ROWS, vocabulary, postings, POSTINGS_SENTENCES, SENTENCE_VECTORS, sentence_vectors
    )
    if rows is None or (rows < 0).sum() > len(rows) // 2:  # the whole product reads the rows in order
        vectors = mean_vectors(postings, sentence_vectors)
    else:
        vectors = ctx.previous.take(KEYWORD_VECTOR_ROWS, vocabulary, compute, rows=rows)
    ctx.store.write_array("keyword_vectors", vectors)
    return {}
