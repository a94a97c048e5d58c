"""The public Python API: build, open, query, answer and update an index in a few calls.

Everything the command line does goes through here or the layer right below it::

    index = Index.build(["docs/"], ".hopgraph/docs")
    result = index.retrieve("Who founded ...?", method="ppr", groups={"legal"})
    reply = index.answer("Who founded ...?", llm=LLMConfig(base_url="http://127.0.0.1:8000/v1"))
    index = index.update(add=[Document(id="memo-7", text="...")], delete=["memo-1"])

Opening an index to read it loads no build pipeline, LLM client or NER model: those are imported
only by the calls that need them (:meth:`Index.build`, :meth:`Index.update`, :meth:`Index.answer`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hopgraph.config import (
    QUERY_SECTIONS,
    HopgraphConfig,
    LLMConfig,
    apply_overrides,
    dotted_keys,
    load_config,
    validate_config,
)
from hopgraph.documents import Document, repeated_id
from hopgraph.errors import ConfigError, InputError, cut, listed
from hopgraph.index.jobs import first_ids, id_counts
from hopgraph.retrieve.filters import MetadataFilter, reader_filter
from hopgraph.retrieve.packing import Evidence, RetrievalResult
from hopgraph.retrieve.partitioned import open_index
from hopgraph.retrieve.retriever import Retriever

if TYPE_CHECKING:
    from hopgraph.retrieve.answer import Answer

Config = HopgraphConfig
Source = str | os.PathLike[str] | Document


@dataclass(frozen=True)
class Job:
    """An update job: ``status`` is queued, running, done (``version`` is then live) or failed (``error`` says why).

    ``add`` and ``delete`` are the first ids the job adds and deletes (up to 20, all of a small job);
    ``added`` and ``deleted`` count them all."""

    id: str
    status: str
    add: tuple[str, ...]
    delete: tuple[str, ...]
    added: int = 0
    deleted: int = 0
    version: str | None = None
    error: str | None = None
    record: Mapping[str, Any] = field(default_factory=dict, repr=False)  # the full record as stored

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Job:
        (add, delete), (added, deleted) = first_ids(record), id_counts(record)
        return cls(
            record["id"],
            record["status"],
            tuple(add),
            tuple(delete),
            added,
            deleted,
            record.get("version"),
            record.get("error"),
            dict(record),
        )


@dataclass(frozen=True)
class AnswerResult:
    """An answer with its citations and the retrieval it was made from."""

    answer: Answer
    retrieval: RetrievalResult

    @property
    def text(self) -> str:
        return self.answer.text

    @property
    def found(self) -> bool:
        return self.answer.found


def _items(values: Any, what: str, kinds: tuple[type, ...]) -> list[Any]:
    """``values`` as a list of ``kinds``; a lone one is a list of one (iterating a string would give
    its letters: a document "memo-1" deleted as 'm', 'e', 'm' …, a reader's group "board" read as
    the groups b, o, a, r, d)."""
    if isinstance(values, kinds):
        return [values]
    names = " or ".join(k.__name__ for k in kinds)
    if not isinstance(values, Iterable) or isinstance(values, (bytes, Mapping)):
        raise InputError(f"{what}: give a list of {names}, not {type(values).__name__}")
    items = list(values)
    wrong = [item for item in items if not isinstance(item, kinds)]
    if wrong:
        raise InputError(f"{what}: {cut(repr(wrong[0]))} is not a {names}")
    return items


def _documents(
    sources: Iterable[Source] | Source, root: str | Path | None = None, index: Path | None = None
) -> tuple[list[Document], list[str]]:
    """Documents given as objects, checked by the rules of every other way in, plus those read
    from paths (files, folders, JSONL, PDF, DOCX, HTML, benchmark files; ids relative to ``root``
    where given, else a file ``index`` holds keeps its id there), and the problems of skipped
    inputs. The same id twice is an InputError: the CLI drops a duplicate file, but objects made in
    code are the caller's to fix."""
    from hopgraph.index.catalog import file_ids  # noqa: PLC0415  (build side only)
    from hopgraph.index.ingest import checked_document, read_corpus  # noqa: PLC0415

    given = _items(sources, "sources", (str, os.PathLike, Document))
    documents = []
    for n, item in enumerate(given, 1):
        if isinstance(item, Document):
            try:
                documents.append(checked_document(item))  # as read_corpus stores them
            except ValueError as exc:
                raise InputError(f"document {n} (id {cut(str(item.id))!r}): {exc}") from None
    paths = [s for s in given if not isinstance(s, Document)]
    problems: list[str] = []
    if paths:  # the index's file ids are read only where files are given (the whole documents table)
        known_ids = file_ids(index) if index is not None and root is None else None
        corpus = read_corpus(paths, root=root, known_ids=known_ids)
        documents += corpus.documents
        problems = [str(p) for p in corpus.problems]
    twice = repeated_id([d.id for d in documents])
    if twice is not None:
        raise InputError(f"document id {cut(twice)!r} is given twice (ids name one document each)")
    return documents, problems


class Index:
    """One index directory opened for reading (its live version); build and update return a new one."""

    def __init__(self, path: str | Path, config: HopgraphConfig | None = None, *, skipped: Sequence[str] = ()):
        self.path = Path(path)
        self._loaded = open_index(self.path)
        self.config: HopgraphConfig = config or self._loaded.config
        self._retriever = Retriever.configured(self._loaded, self.config)
        self.skipped: list[str] = list(skipped)  # inputs a build or update left out, with the reason

    # ------------------------------------------------------------------ opening and building
    @classmethod
    def open(cls, path: str | Path, overrides: Mapping[str, Any] | None = None) -> Index:
        """Open the live version of ``path``; ``overrides`` change query-time settings by TOML name,
        e.g. ``{"retrieval.method": "kg", "llm.base_url": "..."}`` (build settings are the index's own)."""
        index = cls(path)
        if overrides:
            given = dotted_keys(dict(overrides))  # nested or dotted: only the leaves named change
            fixed = [key for key in given if not key.startswith((*QUERY_SECTIONS, "serve."))]
            if fixed:
                raise ConfigError(
                    f"Index.open overrides: {listed(fixed)} are build settings, the index's own (rebuild to "
                    f"change them); query-time settings start with {', '.join(QUERY_SECTIONS)}"
                )
            config = validate_config(apply_overrides(index.config.model_dump(), given), "Index.open overrides")
            index = cls(path, config)
        return index

    @classmethod
    def build(
        cls,
        sources: Iterable[Source] | Source,
        path: str | Path,
        config: HopgraphConfig | None = None,
        *,
        overwrite: bool = False,
        progress: bool = False,
        root: str | Path | None = None,
    ) -> Index:
        """Index ``sources`` (paths and/or :class:`Document` objects) into ``path`` and open it.

        A file's id is its path relative to ``root`` (default: the folder given, or a lone file's folder).

        An interrupted build resumes when called again with the same corpus and settings; an index
        of another corpus or settings is replaced only with ``overwrite``.
        """
        from hopgraph.index.pipeline import build_index  # noqa: PLC0415
        from hopgraph.index.versions import reset_to_root  # noqa: PLC0415

        documents, problems = _documents(sources, root)
        build_index(documents, path, config or HopgraphConfig(), progress=progress, overwrite=overwrite)
        if overwrite:
            reset_to_root(path)
        return cls(path, skipped=problems)

    # ------------------------------------------------------------------ reading
    @property
    def version(self) -> str:
        """The version read ("" = the index built by :meth:`build`, else the update job that made it)."""
        return self._loaded.version

    @property
    def manifest(self) -> dict[str, Any]:
        """The version's manifest: counts, seconds and LLM usage per stage, peak memory, settings."""
        return self._loaded.manifest

    @property
    def methods(self) -> list[str]:
        """Retrieval methods this index has the parts for."""
        from hopgraph.retrieve.methods import available_methods  # noqa: PLC0415

        return available_methods(self._loaded)

    def documents(self) -> list[Document]:
        """The documents of the live version, in index order."""
        table = self._loaded.documents
        return [
            Document(id=i, text=t, title=ti, source=s, metadata=m)
            for i, t, ti, s, m in zip(table["id"], table["text"], table["title"], table["source"], table["metadata"])
        ]

    def retrieve(
        self,
        question: str,
        *,
        method: str | None = None,
        budget: int | None = None,
        groups: Iterable[str] | None = None,
        where: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> RetrievalResult:
        """Evidence for ``question`` within ``budget`` tokens, each piece with its graph path and sources.

        ``groups``: the reader's groups (only documents whose acl names one of them, and documents
        without acl, are used); None reads everything. ``where``: field → value, list or operators
        (see :mod:`hopgraph.retrieve.filters`); an unknown field is a ConfigError naming the known ones.
        ``params``: retrieval settings as in the [retrieval] section, e.g. ``{"ppr": {"damping": 0.6}}``.
        """
        if not isinstance(question, str) or not question.strip():
            raise InputError("the question is empty: give the question to retrieve evidence for")
        if where is not None and not isinstance(where, Mapping):
            raise InputError(f"where: give a mapping of field → condition, not {type(where).__name__}")
        if params is not None and not isinstance(params, Mapping):
            raise InputError(f"params: give a mapping of retrieval settings, not {type(params).__name__}")
        flt = None
        if groups is not None or where:
            try:
                flt = reader_filter(
                    self._loaded,
                    dict(where or {}),
                    groups=frozenset(_items(groups, "groups", (str,))) if groups is not None else None,
                    max_keys=self.config.serve.max_filter_keys,
                    max_values=self.config.serve.max_filter_values,
                )
            except ValueError as exc:
                raise ConfigError(f"where: {exc}") from None
        return self._retriever.retrieve(
            question,
            method=method,
            budget=budget,
            metadata_filter=flt,
            overrides=dotted_keys(dict(params)) if params else None,
        )

    def answer(self, question: str, *, llm: LLMConfig | None = None, **retrieve_args: Any) -> AnswerResult:
        """Retrieve, then answer from the evidence with the LLM (``llm`` or the index's [llm] settings)."""
        from hopgraph.llm import open_llm  # noqa: PLC0415
        from hopgraph.retrieve.answer import answer  # noqa: PLC0415

        result = self.retrieve(question, **retrieve_args)
        return AnswerResult(answer(open_llm(llm or self.config.llm), result, self.config.answer), result)

    # ------------------------------------------------------------------ updating
    def update(
        self,
        *,
        add: Iterable[Source] | Source = (),
        delete: Iterable[str] | str = (),
        wait: bool = True,
        keep: int = 2,
        llm: LLMConfig | None = None,
        progress: bool = False,
        root: str | Path | None = None,
    ) -> Index | Job:
        """Add (an existing id is replaced) and delete documents as one job.

        Files added get ids relative to ``root``, so an edited copy elsewhere replaces its original.

        With ``wait`` (default) the job runs now and the returned :class:`Index` reads the new live
        version; old versions beyond ``keep`` are deleted. Without it the job is only queued and
        its :class:`Job` is returned (run it later with ``update(wait=True)`` or ``hopgraph update --resume``);
        with nothing to add or delete nothing is queued or run, and this index is returned.

        Documents given as objects pass the rules of every other way in (a non-empty id and text, an
        ``acl`` of group names: a lone string is one group, a ``timestamp`` in ISO 8601); a lone path,
        document or id may be given without a list.
        """
        from hopgraph.index import versions  # noqa: PLC0415

        documents, problems = _documents(add, root, self.path)
        deletes = _items(delete, "delete", (str,))
        job = None
        if documents or deletes:
            job = Job.from_record(versions.submit_update(self.path, documents, deletes))
        if not wait:
            return job if job is not None else self  # nothing given: nothing queued, nothing run
        for record in versions.run_pending(self.path, llm=llm, progress=progress):
            if job is not None and record["id"] == job.id and record["status"] != "done":
                return Job.from_record(record)
        from hopgraph.index import garbage  # noqa: PLC0415

        garbage.collect_garbage(self.path, keep=keep)
        return type(self)(self.path, self.config, skipped=problems)

    def jobs(self) -> list[Job]:
        """Every update job of this index directory, oldest first ("stopped": left running by a run
        that was killed; it resumes with the next update)."""
        from hopgraph.index.jobs import as_seen, list_jobs  # noqa: PLC0415

        return [Job.from_record(r) for r in as_seen(self.path, list_jobs(self.path))]

    def __repr__(self) -> str:
        return f"Index({str(self.path)!r}, version={self.version or 'root'!r})"


__all__ = [
    "AnswerResult",
    "Config",
    "Document",
    "Evidence",
    "Index",
    "Job",
    "LLMConfig",
    "MetadataFilter",
    "RetrievalResult",
    "load_config",
]
