"""The LLM-free indexing pipeline as named stages over an :class:`IndexStore`.

Each stage reads what earlier stages stored and writes its own files; the manifest records a
stage as done only after its files are in place. Running the same command again after a crash
skips finished stages. A different corpus or build setting is refused instead of being mixed in.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import resource
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from hopgraph.config import HopgraphConfig
from hopgraph.documents import Document
from hopgraph.errors import IndexFormatError, InputError, OtherIndexError
from hopgraph.index.context import BuildContext
from hopgraph.index.graph_stages import stage_concept_graph, stage_entities, stage_knn_graph
from hopgraph.index.llm_stages import stage_cue_graph, stage_kg_extract
from hopgraph.index.progress import RunProgress
from hopgraph.index.reuse import (
    EMBEDDING,
    FIRST_BUILD,
    ROW_RULES,
    STAGE_TEXT_MODELS,
    PreviousVersion,
    recorded_text_models,
    setting,
    text_models,
)
from hopgraph.index.text_stages import (
    stage_chunks,
    stage_documents,
    stage_embed_sentences,
    stage_embed_units,
    stage_keyword_vectors,
    stage_keywords,
)
from hopgraph.store import BUILD_LOCK, PARTITIONS, CorruptManifestError, IndexStore


def corpus_fingerprint(documents: Sequence[Document]) -> str:
    digest = hashlib.sha256()
    for doc in documents:
        digest.update(json.dumps([doc.id, doc.title, doc.metadata], sort_keys=True, default=str).encode())
        digest.update(hashlib.sha256(doc.text.encode("utf-8")).digest())
    return digest.hexdigest()


@dataclass(frozen=True)
class Stage:
    """A registered pipeline stage: what it reads and which settings decide its output.

    ``settings`` are dotted config keys (a section name takes all of its keys); ``reads`` are the
    stages whose files it reads. A stage's settings key is a hash of its own settings and the keys
    of the stages it reads, so a changed setting invalidates exactly that stage and what follows
    from it; nothing else decides invalidation.
    """

    name: str
    run: Callable[[BuildContext], dict[str, int]]
    settings: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()
    llm: bool = False  # made by the LLM: a settings change redoes it (cached calls are free) instead of refusing
    enabled: Callable[[HopgraphConfig], bool] = lambda config: True


# LLM settings that decide what the model writes (how to reach it is not among them).
LLM_OUTPUT = (
    "llm.model",
    "llm.structured",
    "llm.max_tokens",
    "llm.temperature",
    "llm.parse_retries",
    "llm.context_tokens",
)

STAGES: list[Stage] = [
    Stage("documents", stage_documents, ("access",)),
    Stage("chunks", stage_chunks, ("chunking",), ("documents",)),
    Stage("keywords", stage_keywords, ("keywords.method", "keywords.tfidf_top", "keywords.min_length"), ("chunks",)),
    Stage("embed_units", stage_embed_units, EMBEDDING, ("chunks",)),
    Stage("embed_sentences", stage_embed_sentences, EMBEDDING, ("chunks",)),
    Stage("keyword_vectors", stage_keyword_vectors, (), ("keywords", "embed_sentences")),
    Stage(
        "knn_graph",
        stage_knn_graph,
        ("graph.knn_k", "graph.exact_knn_limit", "graph.damping", "keywords.max_df", "keywords.max_postings"),
        ("keywords", "embed_units"),
    ),
    Stage(
        "concept_graph",
        stage_concept_graph,
        ("graph.theta_sem", "graph.theta_co", "graph.damping"),
        ("keywords", "keyword_vectors"),
    ),
    Stage(
        "entities",
        stage_entities,
        (
            "graph.synonym_threshold",
            "graph.synonym_k",
            "graph.entity_phrases",
            "graph.exact_synonym_limit",
            *EMBEDDING,
        ),
        ("chunks", "embed_units"),
    ),
    Stage(
        "kg_extract",
        stage_kg_extract,
        (
            "extraction.kg",
            "extraction.core_fraction",
            "extraction.seed",
            "extraction.resolve_threshold",
            *EMBEDDING,
            *LLM_OUTPUT,
        ),
        ("knn_graph", "concept_graph"),
        llm=True,
        enabled=lambda config: config.extraction.kg != "none",
    ),
    Stage(
        "cue_graph",
        stage_cue_graph,
        ("extraction.cue_alpha", "extraction.cue_metric", *EMBEDDING, *LLM_OUTPUT),
        ("embed_units",),
        llm=True,
        enabled=lambda config: config.extraction.cue_alpha is not None,
    ),
]


def _following(names: set[str]) -> set[str]:
    """The stages ``names`` and every stage that reads one of them, directly or through others."""
    out = set(names)
    for stage in STAGES:  # in order: the stages a stage reads come before it
        if out & set(stage.reads):
            out.add(stage.name)
    return out


def planned_stages(config: HopgraphConfig) -> list[tuple[str, Callable[[BuildContext], dict[str, int]]]]:
    return [(stage.name, stage.run) for stage in STAGES if stage.enabled(config)]


def stage_keys(config: HopgraphConfig) -> dict[str, str]:
    """Settings key per planned stage: its own settings and the keys of the stages it reads."""
    data = config.model_dump()
    keys: dict[str, str] = {}
    for stage in STAGES:
        own = {name: setting(data, name) for name in stage.settings}
        upstream = {name: keys.get(name, "") for name in stage.reads}
        keys[stage.name] = hashlib.sha256(
            json.dumps([own, upstream], sort_keys=True, default=str).encode()
        ).hexdigest()[:16]
    return {stage.name: keys[stage.name] for stage in STAGES if stage.enabled(config)}


def _leaves(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _leaves(inner, f"{path}.{key}")
    else:
        yield path, value


def _only_newer_settings(stage: Stage, stored: dict[str, Any], config: HopgraphConfig) -> bool:
    """Whether a stage's settings differ from those an index was built with only by settings that index's
    hopgraph did not have, at their defaults: the change then comes with an upgrade, not from the user,
    and the stage is rebuilt instead of refused (an index built before ``graph.entity_phrases``)."""
    now, default = config.model_dump(mode="json"), HopgraphConfig().model_dump(mode="json")
    for name in stage.settings:
        for path, value in _leaves(setting(now, name), name):
            try:
                before = setting(stored, path)
            except (KeyError, TypeError):  # newer than the index
                if value != setting(default, path):
                    return False
                continue
            if before != value:
                return False
    return True


# ------------------------------------------------------------------------------------ driver
def start_manifest(store: IndexStore, config: HopgraphConfig, fingerprint: str, overwrite: bool) -> dict:
    keys = stage_keys(config)
    fresh = {
        "complete": False,
        "row_rules": ROW_RULES,
        "text_models": text_models(),
        "config": config.model_dump(),
        "build_settings": config.build_settings(),
        "stage_settings": keys,
        "corpus_fingerprint": fingerprint,
        "stages": {},
        "counts": {},
    }
    if not store.exists() or overwrite:
        if store.root.exists() and any(p.name != BUILD_LOCK for p in store.root.iterdir()) and not store.exists():
            raise IndexFormatError(
                f"{store.root} exists, is not empty and is not a hopgraph index; choose another --out"
            )
        return fresh
    try:
        manifest = store.read_manifest()
    except CorruptManifestError as exc:
        raise CorruptManifestError(f"{exc}; pass --overwrite to rebuild the index, or choose another --out") from None
    stored = manifest.get("stage_settings")
    if stored is None:  # written before per-stage keys: its LLM-free stages match if its build settings do
        same = manifest.get("build_settings") == config.build_settings()
        stored = {
            stage.name: keys[stage.name] if same else "" for stage in STAGES if not stage.llm and stage.name in keys
        }
    changed = [
        stage.name
        for stage in STAGES
        if stage.name in keys
        and stage.name in stored  # a stage added since the index was built is simply run
        and stored[stage.name] != keys[stage.name]
        and (stage.name in manifest["stages"] or not stage.llm)
    ]
    stored_config = manifest.get("config", {})
    refused = [
        s.name for s in STAGES if s.name in changed and not s.llm and not _only_newer_settings(s, stored_config, config)
    ]
    if not any(record.get("done") for record in manifest["stages"].values()):
        return fresh  # a build refused or stopped before its first stage finished holds nothing to keep
    if refused or manifest.get("corpus_fingerprint") != fingerprint:
        what = f"other build settings (stages {', '.join(refused)})" if refused else "a different corpus"
        raise OtherIndexError(
            f"{store.root} holds an index of {what}; pass --overwrite to rebuild it, or choose another --out", what
        )
    # Only LLM-built parts (re-running them costs nothing for cached calls) and stages whose settings
    # gained keys since the index was built (a newer hopgraph), at their defaults.
    for name in changed:
        manifest["stages"].pop(name, None)
    for name in set(manifest["stages"]) - set(keys):  # no longer configured
        manifest["stages"].pop(name, None)
    if changed:
        manifest["complete"] = False
    before, now = recorded_text_models(manifest) or text_models(), text_models()
    moved = {kind for kind in now if kind in before and before[kind] != now[kind]}
    for name in _following({stage for stage, kinds in STAGE_TEXT_MODELS.items() if moved & set(kinds)}):
        if manifest["stages"].pop(name, None) is not None:  # made with other models
            manifest["complete"] = False
    manifest["config"] = config.model_dump()
    manifest["stage_settings"] = keys
    manifest["text_models"] = text_models()
    return manifest


def _model_work(ctx: BuildContext) -> tuple[int, int, int, int]:
    """(texts embedded, texts found in the vector cache, texts analysed, analyses found in the
    analysis cache) so far in this build, through the caches this build created."""
    cache = getattr(ctx.__dict__.get("embedder"), "inner", None)  # only an embedder this build created
    analyser = ctx.__dict__.get("analyser")
    return (
        getattr(cache, "misses", 0),
        getattr(cache, "hits", 0),
        analyser.misses if analyser else 0,
        analyser.hits if analyser else 0,
    )


def peak_memory_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def build_index(
    documents: Sequence[Document],
    out: str | Path,
    config: HopgraphConfig,
    *,
    progress: bool = True,
    overwrite: bool = False,
    stop_after: str | None = None,
    engine: Any = None,
    previous: str | Path | None = None,
) -> dict:
    """Build (or resume building) the LLM-free index of ``documents`` in ``out``; returns the manifest.

    ``previous`` is the complete index an update edits: stages take the rows it already holds for
    unchanged texts from it (:mod:`hopgraph.index.reuse`) instead of reading them from the caches.

    With ``access.isolation`` the index is one complete sub-index per ACL partition (see
    :func:`hopgraph.index.partitions.build_partitioned`); updates rebuild through here, so they need
    nothing special. With ``cluster.engine = "ray"`` the model work runs on a Ray cluster
    (:mod:`hopgraph.index.cluster`), joined or started here for this build unless a connected
    ``engine`` is passed in.
    """
    if not documents:
        raise InputError("no documents to index")
    options: dict[str, Any] = {"progress": progress, "overwrite": overwrite, "stop_after": stop_after}
    if engine is None and config.cluster.engine == "ray":
        from hopgraph.index.cluster import RayEngine  # noqa: PLC0415  (Ray is an optional extra)

        engine = RayEngine(config)
        try:
            return build_index(documents, out, config, **options, engine=engine, previous=previous)
        finally:
            engine.close()
    if config.access.isolation:
        from hopgraph.index.partitions import build_partitioned  # noqa: PLC0415  (it builds through here)

        with IndexStore(out).building():  # each partition's build holds its own folder's lock too
            return build_partitioned(documents, out, config, **options, engine=engine, previous=previous)
    store = IndexStore(out)
    with store.building():
        if overwrite and (store.root / PARTITIONS).is_dir():
            shutil.rmtree(store.root / PARTITIONS)  # left by an earlier isolated build of this directory
        manifest = start_manifest(store, config, corpus_fingerprint(documents), overwrite)
        store.write_manifest(manifest)
        run = RunProgress(
            [name for name, _ in planned_stages(config)], documents, manifest["counts"].get("tokens"), progress
        )
        edited = PreviousVersion(IndexStore(previous), config) if previous is not None else FIRST_BUILD
        ctx = BuildContext(store, config, documents, progress, engine=engine, run=run, previous=edited)
        try:
            with _rare_collections():
                return _run_stages(ctx, manifest, stop_after)
        finally:
            run.close()


class _Collections:
    """Builds running in this process now, and the collector's thresholds before the first."""

    lock = threading.Lock()
    builds = 0
    before: tuple[int, ...] = ()


@contextlib.contextmanager
def _rare_collections() -> Iterator[None]:
    """Run Python's young-generation cycle collections less often while stages run.

    A stage allocates millions of small objects (lists of texts, ids, per-row lists) that live until
    it ends, and collections kept walking them, a measurable share of an insert's time.
    Young collections still run (every 100k allocations instead of 700), and older generations on
    their usual schedule relative to them, so cycles are freed, a little later. Builds overlapping
    in threads share one setting, restored when the last of them ends.
    """
    with _Collections.lock:
        if not _Collections.builds:
            _Collections.before = gc.get_threshold()
            gc.set_threshold(100_000, *_Collections.before[1:])
        _Collections.builds += 1
    try:
        yield
    finally:
        with _Collections.lock:
            _Collections.builds -= 1
            if not _Collections.builds:
                gc.set_threshold(*_Collections.before)


def _run_stages(ctx: BuildContext, manifest: dict[str, Any], stop_after: str | None) -> dict:
    """The stages not done yet, each recorded in the manifest as it finishes; the whole-run bar told."""
    store, config, engine, run = ctx.store, ctx.config, ctx.engine, ctx.run
    for number, (name, stage) in enumerate(planned_stages(config)):
        record = manifest["stages"].get(name, {})
        damaged = record.get("done") and store.damaged(record.get("files", {}))
        if record.get("done") and not damaged:
            run.stage(number, name, done_earlier=True)
            continue
        if damaged:
            tqdm.write(f"{damaged}; rebuilding stage {name}", file=sys.stderr)
        run.stage(number, name)
        store.take_written()
        started = time.perf_counter()
        ctx.usage = {}
        work_before, taken_before = _model_work(ctx), ctx.previous.taken
        if engine is not None:
            engine.stage = name
        try:
            counts = stage(ctx)
        except Exception as exc:
            if engine is not None and (failure := engine.failure(exc)) is not None:
                raise failure from None
            raise
        if "tokens" in counts:
            run.counted(counts["tokens"])
        record = {"done": True, "seconds": round(time.perf_counter() - started, 3), "files": store.take_written()}
        manifest["counts"].update({k: v for k, v in counts.items() if k != "embedding_tokens"})
        if "embedding_tokens" in counts:  # the count of the stages that embed, each once however often it ran
            record["embedding_tokens"] = counts["embedding_tokens"]
        for other in manifest["stages"].values():  # a file belongs to the stage that wrote it last
            other["files"] = {k: v for k, v in other.get("files", {}).items() if k not in record["files"]}
        work = [after - before for after, before in zip(_model_work(ctx), work_before)]
        if any(work[:2]):
            record.update(embedded_new=work[0], embedded_cached=work[1])
        if any(work[2:]):
            record.update(analysed_new=work[2], analysed_cached=work[3])
        if ctx.previous.taken > taken_before:
            record["taken_from_previous"] = ctx.previous.taken - taken_before
        if engine is not None:
            record.update(engine.costs())  # worker_seconds and gpu_seconds this stage spent on the cluster
        if ctx.usage:
            record["llm"] = ctx.usage
        manifest["stages"][name] = record
        if "embedding_tokens" in record:
            manifest["counts"]["embedding_tokens"] = sum(
                r.get("embedding_tokens", 0) for r in manifest["stages"].values()
            )
        manifest["peak_memory_mb"] = max(manifest.get("peak_memory_mb", 0.0), peak_memory_mb())
        store.write_manifest(manifest)
        if name == stop_after:
            return manifest
    run.finish()
    manifest["complete"] = True
    manifest["models"] = {
        "embedding": config.embedding.model,
        "embedding_backend": config.embedding.backend,
        "llm": config.llm.model if config.extraction.active() else None,
    }
    store.write_manifest(manifest)
    store.drop_unrecorded(manifest)  # after the manifest: a kill between them leaves only files to drop
    return manifest
