"""Retrieval methods: each module exposes ``rank(index, query, scope, config) -> candidates``.

LLM-free: text, knng, keyword, concept, ppr. On an index with an LLM knowledge graph: kg, hybrid,
ket, g2cons. On an index with a CUE graph (any α, including 0): cue.
"""
from hopgraph.retrieve.methods import concept, cue, g2cons, keyword, kg, ket, knng, ppr, text

METHODS = {"text": text.rank, "knng": knng.rank, "keyword": keyword.rank, "concept": concept.rank, "ppr": ppr.rank,
           "kg": kg.rank, "hybrid": ket.rank_hybrid, "ket": ket.rank, "g2cons": g2cons.rank, "cue": cue.rank}
LLM_FREE = ("text", "knng", "keyword", "concept", "ppr")
