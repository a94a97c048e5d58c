"""Retrieval methods: each module exposes ``rank(index, query, scope, config) -> candidates``."""
from hopgraph.retrieve.methods import concept, keyword, knng, ppr, text

METHODS = {"text": text.rank, "knng": knng.rank, "keyword": keyword.rank, "concept": concept.rank, "ppr": ppr.rank}
