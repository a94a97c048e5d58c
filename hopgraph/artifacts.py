"""The index schema: every stored artifact, its kind, shape, what a row means and the stage that writes it.

Stages write and methods read artifacts by the constants below, never by free strings, and
``tests/test_artifacts.py`` checks a built index against this table (every file declared, every
declared shape honoured). ``python -m hopgraph.artifacts`` prints it as a Markdown table.

Shapes use: D documents, C chunks, U sub-chunks ("units"), S sentences, K keywords, d embedding
dimension, w cosine candidates and h lexical neighbours per chunk, a digit that many columns; KG:
E entities, M mentions with a description, F mentions as written, R relations; CUE: Q knowledge
units, N entity nodes, P unit–entity mentions; entity layer: G entities (spaCy names and titles).
Vectors are float32 with unit-length rows (all-zero where there was nothing to embed, e.g. a
keyword no sentence contains); graphs are CSR matrices stored as .npz.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["table", "array", "graph"]


@dataclass(frozen=True)
class Artifact:
    name: str
    kind: Kind
    stage: str
    shape: str  # rows (× columns), in the letters of the module docstring
    meaning: str


DOCUMENTS, CHUNKS, UNITS, SENTENCES = "documents", "chunks", "units", "sentences"
DOCUMENT_TOKENS = "document_tokens"
# Table columns only an update reads (where the cut resumes): a query never loads them.
UPDATE_COLUMNS = frozenset({"token_start"})
POSTINGS_CHUNKS, POSTINGS_UNITS, POSTINGS_SENTENCES, KEYWORDS = (
    "postings_chunks",
    "postings_units",
    "postings_sentences",
    "keywords",
)
UNIT_VECTORS, CHUNK_VECTORS, SENTENCE_VECTORS, KEYWORD_VECTORS = (
    "unit_vectors",
    "chunk_vectors",
    "sentence_vectors",
    "keyword_vectors",
)
KNN, CHUNK_RANK_KNN = "knn", "chunk_rank_knn"
KNN_COSINE_SCORES, KNN_COSINE_INDICES = "knn_cosine_scores", "knn_cosine_indices"
KNN_LEXICAL_COUNTS, KNN_LEXICAL_INDICES = "knn_lexical_counts", "knn_lexical_indices"
CONCEPTS, CONCEPT_RANK, CHUNK_RANK_CONCEPT = "concepts", "concept_rank", "chunk_rank_concept"
KG_ENTITIES, KG_MENTIONS, KG_RELATIONS, KG_SURFACES = "kg_entities", "kg_mentions", "kg_relations", "kg_surfaces"
KG_ENTITY_CHUNKS, KG_ENTITY_VECTORS, KG_RELATION_VECTORS = (
    "kg_entity_chunks",
    "kg_entity_vectors",
    "kg_relation_vectors",
)
KG_SURFACE_VECTORS = "kg_surface_vectors"
CUE_UNITS, CUE_ENTITIES, CUE_UNIT_ENTITIES = "cue_units", "cue_entities", "cue_unit_entities"
CUE_MENTIONS = "cue_mentions"
CUE_UNIT_VECTORS, CUE_ENTITY_VECTORS = "cue_unit_vectors", "cue_entity_vectors"
ENTITY_SENTENCES = "entity_sentences"
ENTITIES, ENTITY_MENTIONS, ENTITY_VECTORS, ENTITY_SYNONYMS = (
    "entities",
    "entity_mentions",
    "entity_vectors",
    "entity_synonyms",
)
ENTITY_SYNONYM_SCORES, ENTITY_SYNONYM_INDICES = "entity_synonym_scores", "entity_synonym_indices"

SCHEMA: dict[str, Artifact] = {
    a.name: a
    for a in [
        Artifact(
            DOCUMENTS,
            "table",
            "documents",
            "D",
            "one per document: id, title, source, text, metadata (JSON), acl (list of groups or null)",
        ),
        Artifact(
            CHUNKS,
            "table",
            "chunks",
            "C",
            "ℓ-token chunk: text, heading (titles searched with it), tokens, docs (document rows), starts "
            "(where its text begins in each), acl, token_start (its first token's position in its token stream)",
        ),
        Artifact(
            UNITS,
            "table",
            "chunks",
            "U",
            "sub-chunk (≤2^τ per chunk): text, heading, tokens, docs, chunk (its row), starts, token_start",
        ),
        Artifact(
            DOCUMENT_TOKENS,
            "array",
            "chunks",
            "D × 2",
            "the document's first token position in its token stream, and its tokens (an update resumes "
            "the cut from them)",
        ),
        Artifact(
            SENTENCES, "table", "chunks", "S", "punkt sentence: text, tokens, doc, unit (the sub-chunk it starts in)"
        ),
        Artifact(KEYWORDS, "table", "keywords", "K", "keyword (sorted): keyword, chunk_df (chunks containing it)"),
        Artifact(POSTINGS_CHUNKS, "graph", "keywords", "C × K", "1 where the chunk contains the keyword"),
        Artifact(POSTINGS_UNITS, "graph", "keywords", "U × K", "1 where the sub-chunk contains the keyword"),
        Artifact(POSTINGS_SENTENCES, "graph", "keywords", "S × K", "1 where the sentence contains the keyword"),
        Artifact(UNIT_VECTORS, "array", "embed_units", "U × d", "sub-chunk embedding (long texts: mean of windows)"),
        Artifact(CHUNK_VECTORS, "array", "embed_units", "C × d", "mean of the chunk's sub-chunk vectors, renormalised"),
        Artifact(SENTENCE_VECTORS, "array", "embed_sentences", "S × d", "sentence embedding"),
        Artifact(
            KEYWORD_VECTORS,
            "array",
            "keyword_vectors",
            "K × d",
            "mean of the vectors of the sentences containing the keyword",
        ),
        Artifact(KNN, "graph", "knn_graph", "C × C", "symmetric KNN graph: K/2 lexical + K/2 cosine neighbours (KET)"),
        Artifact(
            CHUNK_RANK_KNN, "array", "knn_graph", "C", "PageRank of each chunk in the KNN graph (KET core selection)"
        ),
        Artifact(
            KNN_COSINE_INDICES,
            "array",
            "knn_graph",
            "C × w",
            "each chunk's nearest other chunks by cosine, best first (-1: none found); w = K (0 where K = 1), "
            "at most C - 1; an update patches them",
        ),
        Artifact(KNN_COSINE_SCORES, "array", "knn_graph", "C × w", "the cosine of each of those candidates"),
        Artifact(
            KNN_LEXICAL_INDICES,
            "array",
            "knn_graph",
            "C × h",
            "each chunk's lexical neighbours: the chunks sharing the most keywords (not too common) with it, ties to "
            "the lower index (-1: none); h = ⌈K/2⌉, at most C - 1; an update patches them",
        ),
        Artifact(KNN_LEXICAL_COUNTS, "array", "knn_graph", "C × h", "the keywords each of those neighbours shares"),
        Artifact(
            CONCEPTS,
            "graph",
            "concept_graph",
            "K × K",
            "concept graph: cosine ≥ θ_sem and ≥ θ_co shared chunks (G2ConS)",
        ),
        Artifact(CONCEPT_RANK, "array", "concept_graph", "K", "PageRank of each concept"),
        Artifact(
            CHUNK_RANK_CONCEPT,
            "array",
            "concept_graph",
            "C",
            "sum of the concept ranks of the chunk's keywords (G2ConS core selection)",
        ),
        Artifact(KG_ENTITIES, "table", "kg_extract", "E", "resolved entity: name, type"),
        Artifact(KG_MENTIONS, "table", "kg_extract", "M", "described mention: entity, chunk, description"),
        Artifact(
            KG_RELATIONS,
            "table",
            "kg_extract",
            "R",
            "relation: source, target (entity rows), source_name, target_name (as extracted), description, "
            "strength, chunk, model, extracted_at, confidence",
        ),
        Artifact(
            KG_SURFACES,
            "table",
            "kg_extract",
            "F",
            "every extracted mention as written: entity, chunk, name, description (access control scores and names "
            "entities from readable ones)",
        ),
        Artifact(KG_ENTITY_CHUNKS, "graph", "kg_extract", "E × C", "1 where the entity is mentioned in the chunk"),
        Artifact(KG_ENTITY_VECTORS, "array", "kg_extract", "E × d", "embedding of the entity's name and descriptions"),
        Artifact(KG_RELATION_VECTORS, "array", "kg_extract", "R × d", "embedding of 'source — target: description'"),
        Artifact(KG_SURFACE_VECTORS, "array", "kg_extract", "F × d", "embedding of each mention's 'name: description'"),
        Artifact(
            CUE_UNITS, "table", "cue_graph", "Q", "knowledge unit: text, tokens, docs, chunk, source (llm or sentence)"
        ),
        Artifact(CUE_ENTITIES, "table", "cue_graph", "N", "spaCy entity node: name (normalised), label"),
        Artifact(CUE_UNIT_ENTITIES, "graph", "cue_graph", "Q × N", "1 where the unit mentions the entity"),
        Artifact(
            CUE_MENTIONS,
            "table",
            "cue_graph",
            "P",
            "per stored entry of cue_unit_entities (in its CSR order): label spaCy gave that mention (an update "
            "takes unchanged chunks' mentions and recounts each entity's most said label)",
        ),
        Artifact(CUE_UNIT_VECTORS, "array", "cue_graph", "Q × d", "knowledge-unit embedding"),
        Artifact(CUE_ENTITY_VECTORS, "array", "cue_graph", "N × d", "entity-name embedding"),
        Artifact(
            ENTITIES,
            "table",
            "entities",
            "G",
            "named entity or document title (no LLM): name (normalised), label (spaCy's, or TITLE), display",
        ),
        Artifact(ENTITY_MENTIONS, "graph", "entities", "U × G", "1 where the sub-chunk names the entity"),
        Artifact(
            ENTITY_VECTORS,
            "array",
            "entities",
            "G × d",
            "entity-name embedding (titles and names in ≥ 2 sub-chunks; zero rows elsewhere)",
        ),
        Artifact(ENTITY_SYNONYMS, "graph", "entities", "G × G", "symmetric: name cosine where ≥ the synonym threshold"),
        Artifact(
            ENTITY_SYNONYM_INDICES,
            "array",
            "entities",
            "E × k",
            "for the E embedded names (non-zero rows of entity_vectors, in order), their k nearest other embedded "
            "names by cosine, best first, as positions among those E (-1: none found); an update patches them",
        ),
        Artifact(ENTITY_SYNONYM_SCORES, "array", "entities", "E × k", "the cosine of each of those candidates"),
        Artifact(
            ENTITY_SENTENCES,
            "graph",
            "entities",
            "S × G",
            "1 where the sentence names the entity, for sentences naming 2–12 (co-occurrence edges, per reader)",
        ),
    ]
}

FOLDERS: dict[Kind, tuple[str, str]] = {
    "table": ("tables", ".parquet"),
    "array": ("arrays", ".npy"),
    "graph": ("graphs", ".npz"),
}


def markdown() -> str:
    """The schema as a Markdown table (for docs and ``python -m hopgraph.artifacts``)."""
    rows = ["| artifact | kind | shape | stage | a row is |", "|---|---|---|---|---|"]
    rows += [f"| `{a.name}` | {a.kind} | {a.shape} | {a.stage} | {a.meaning} |" for a in SCHEMA.values()]
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
