"""Retrieval settings: the method, the budget λ, and one section per method."""

from __future__ import annotations

from pydantic import Field

from hopgraph.config.base import Section


class TextMethod(Section):
    pass


class KnngMethod(Section):
    neighbour_weight: float = Field(
        0.5, ge=0, le=1, description="Share of a seed chunk's score passed to its KNN neighbours."
    )


class KeywordMethod(Section):
    pool_factor: float = Field(
        2.0,
        ge=1,
        le=100,
        description="Seed keywords are added until their sub-chunks hold pool_factor × budget tokens (KET Alg. 4 "
        "line 2).",
    )


class ConceptMethod(Section):
    top_k: int = Field(25, ge=1, le=10_000, description="k: directly associated concepts (G2ConS).")
    depth: int = Field(2, ge=0, le=6, description="N: BFS depth for expanded concepts.")


class PprMethod(Section):
    text_weight: float = Field(0.5, ge=0, le=1000, description="α: weight of query–passage cosine.")
    graph_weight: float = Field(
        1.0, ge=0, le=1000, description="β: weight of personalised PageRank over the keyword graph."
    )
    path_weight: float = Field(
        0.1, ge=0, le=1000, description="γ: weight of the best seed-keyword path into the passage."
    )
    meta_weight: float = Field(
        0.0, ge=0, le=1000, description="δ: weight of metadata freshness (newer timestamp = higher)."
    )
    seed_keywords: int = Field(25, ge=1, le=100_000, description="Query seeds: keywords most similar to the query.")
    damping: float = Field(0.5, gt=0, lt=1, description="PPR continuation probability (low = stay near the seeds).")
    entity_weight: float = Field(
        4.0,
        ge=0,
        le=1000,
        description="ε: weight of personalised PageRank over the entity layer (named entities and titles, with a "
        "second hop through entities of the best first-hop passages); 0 or an index without the layer: unused. "
        "Swept on MuSiQue-500 and HotpotQA-500 (scripts/results/sweeps/ppr_entity_weight_*).",
    )
    seed_entities: int = Field(
        10, ge=1, le=10_000, description="Entity seeds besides those the question names: names nearest the query."
    )
    bridge_entities: int = Field(
        12,
        ge=0,
        le=1000,
        description="Second hop: entities named by the best first-hop passages (not by the question) that seed the "
        "entity walk too, the most specific first; 0: no second hop. Swept with ε "
        "(scripts/results/sweeps/ppr_entity_weight_*bridges_*, ppr_entity_weight_higher_*).",
    )
    entity_cooccurrence_weight: float = Field(
        0.3,
        ge=0,
        le=1,
        description="Entity walk: weight of an edge between two entities per sentence naming both (capped at 1, a "
        "mention's weight), counted over the sentences the reader may read; 0: names are linked only through "
        "passages and synonyms. Swept on MuSiQue-500 and HotpotQA-500 (scripts/results/sweeps/"
        "ppr_entity_cooccurrence_*).",
    )
    lexical_weight: float = Field(
        0.0,
        ge=0,
        le=1000,
        description="λ: weight of BM25 over the question's keywords (0: on MuSiQue-500 every weight tried lowered "
        "Coverage, scripts/results/sweeps/ppr_lexical_weight_*).",
    )


class KgMethod(Section):
    seed_entities: int = Field(10, ge=1, le=200, description="Seed entities nearest the query (KET Alg. 2 line 1).")
    relation_share: float = Field(
        0.5,
        gt=0,
        le=1,
        description="Share of the channel's budget for seed entities and their relations; chunks fill the rest "
        "(Alg. 2 line 2).",
    )


class KetMethod(Section):
    theta: float = Field(
        0.4,
        ge=0,
        le=1,
        description="θ: share of λ from the KG channel; the keyword channel gets the rest (KET; hybrid uses 0.5 "
        "with the text channel).",
    )


class G2consMethod(Section):
    kg_weight: float = Field(
        0.6,
        ge=0,
        le=1,
        description="λ_w: share of the context for the core-KG channel; the concept channel gets the rest (G2ConS).",
    )


class CueMethod(Section):
    top_k: int = Field(
        3,
        ge=1,
        le=100,
        description="K: entity nodes matched per query entity, anchor units nearest the query, and units expanded "
        "per anchor entity (CUE-RAG §4.1, Fig. 6a).",
    )
    depth: int = Field(
        3,
        ge=1,
        le=10,
        description="D: Q-Iter search depth, i.e. most knowledge units in one beam state (CUE-RAG §4.1, Fig. 6c).",
    )
    beam: int = Field(
        5, ge=1, le=100, description="M: beam states kept per depth after reranking (CUE-RAG §4.1, Fig. 6b)."
    )
    chunks: int = Field(
        5,
        ge=1,
        le=1000,
        description="N: chunks returned by the final rerank, placed first in the context; further pieces only fill "
        "the budget (CUE-RAG §4.1).",
    )
    spreading_activation: bool = Field(
        True,
        description="Seed with the entity nodes nearest the query's spaCy entities (Alg. 4 lines 3-7; 'w/o SA' in "
        "Table 4 when off).",
    )
    knowledge_anchoring: bool = Field(
        True,
        description="Seed with the entities of the K units nearest the query (Alg. 4 lines 8-10; 'w/o KA' in Table "
        "4 when off).",
    )
    query_update: bool = Field(
        True,
        description="Subtract each added unit's vector from the state's query vector (Alg. 3 line 11; 'w/o QU' in "
        "Table 4 when off).",
    )


class RetrievalConfig(Section):
    method: str = Field(
        "ppr",
        pattern=r"^[a-z][a-z0-9_-]{0,40}$",
        description="Retrieval method, one of those registered in hopgraph/retrieve/methods: text, bm25, knng, "
        "keyword, concept, ppr; "
        "kg, hybrid, ket, g2cons (need an index built with extraction.kg); cue (needs extraction.cue_alpha).",
    )
    budget: int = Field(12000, ge=50, le=1_000_000, description="λ: context budget in tokens.")
    sentence_mix: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Share of a sub-chunk's query similarity taken from its best sentence (0 = sub-chunk vector "
        "only); used by every sub-chunk method.",
    )
    text: TextMethod = TextMethod()
    knng: KnngMethod = KnngMethod()
    keyword: KeywordMethod = KeywordMethod()
    concept: ConceptMethod = ConceptMethod()
    ppr: PprMethod = PprMethod()
    kg: KgMethod = KgMethod()
    ket: KetMethod = KetMethod()
    g2cons: G2consMethod = G2consMethod()
    cue: CueMethod = CueMethod()
