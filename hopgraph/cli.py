"""Command line: ``hopgraph init | index | update | jobs | documents | query | eval | inspect | serve | methods``.

Every setting of :class:`hopgraph.config.HopgraphConfig` is also an option named by its TOML key
(``--chunking.size 150``; see :mod:`hopgraph.cli_options`). Precedence: command-line option >
``--config`` TOML file > the index's stored settings (commands that read one) > built-in default.
"""

from __future__ import annotations

import json
import os
import time
import typing
from pathlib import Path
from typing import Any

import click

from hopgraph.cli_options import (
    ENGINE,
    ROOT,
    SUMMARY_JSON,
    VERBOSE,
    Group,
    build_config,
    config_file_option,
    config_options,
    fail,
    settings,
)
from hopgraph.cli_output import (
    EXCERPT_CHARS,
    cluster_cost,
    echo_llm_usage,
    print_result,
    questions_to_ask,
    read_inputs,
)
from hopgraph.cli_updates import documents, jobs, update
from hopgraph.config import BUILD_SECTIONS, QUERY_SECTIONS
from hopgraph.errors import LLMRequestError, LLMUnavailableError

LOCAL_ONLY = "cluster.ner_processes"  # the one [cluster] setting of the local engine


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(package_name="hopgraph")
def main() -> None:
    """hopgraph: on-premises multi-granular Graph-RAG.

    Index a corpus without any LLM (chunks, sub-chunks, sentences, keyword/concept graphs, KNN graph),
    then retrieve multi-hop evidence with provenance, or evaluate methods on benchmark data.
    """


for _command in (update, jobs, documents):  # defined in hopgraph.cli_updates
    main.add_command(_command)


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option(
    "--out", "-o", required=True, type=click.Path(file_okay=False), help="Index directory to create or resume."
)
@config_file_option()
@click.option("--overwrite", is_flag=True, help="Rebuild even if OUT holds an index of another corpus or settings.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bars.")
@ROOT
@VERBOSE
@SUMMARY_JSON
@ENGINE
@config_options(BUILD_SECTIONS, exclude=("cluster.engine",))
def index(
    paths: tuple[str, ...],
    out: str,
    config_file: str | None,
    overwrite: bool,
    quiet: bool,
    root: str | None,
    verbose: bool,
    as_json: bool,
    engine: str | None,
    **options: Any,
) -> None:
    """Index PATHS (files, folders, JSONL, or benchmark data) into OUT.

    Read: .txt, .md, .pdf, .docx, .html and .jsonl files (text in any encoding); every file left
    out is listed with its reason.

    Without --extraction.* options no LLM is used. --extraction.kg adds an LLM knowledge graph and
    --extraction.cue_alpha a CUE-RAG graph, through the OpenAI-compatible server at --llm.base_url;
    re-running with other extraction settings redoes only those stages, and every LLM call is
    cached. A run that is interrupted resumes from its last finished stage when the same command is
    run again.
    """
    from hopgraph.index.pipeline import build_index  # noqa: PLC0415
    from hopgraph.store import CorruptManifestError, IndexStore  # noqa: PLC0415

    config = build_config(config_file, {**options, "cluster__engine": engine})
    given = set(settings(config_file, options, only=("cluster.",))) - {"cluster.engine"}
    # An operator who forgot --engine ray would not know; ner_processes is the local engine's own.
    ignored = sorted(given - {LOCAL_ONLY}) if config.cluster.engine != "ray" else sorted(given & {LOCAL_ONLY})
    if ignored:
        click.secho(
            f"note: {', '.join(ignored[:3])}{' …' if len(ignored) > 3 else ''} apply to "
            f"{'--engine local' if ignored == [LOCAL_ONLY] else '--engine ray'} only; this build runs "
            f"{'on the Ray cluster' if config.cluster.engine == 'ray' else 'in this process'}",
            fg="yellow",
            err=True,
        )
    from hopgraph.retrieve.methods import check_method  # noqa: PLC0415

    check_method(config.retrieval.method, source=config_file or "settings")
    IndexStore(out).refuse_if_building()  # before reading the corpus, which can take minutes
    corpus = read_inputs(paths, root, None, progress=not quiet)
    try:
        earlier = {} if overwrite else IndexStore(out).finished_stages()  # --overwrite runs every stage
    except CorruptManifestError:
        earlier = {}  # build_index refuses it, saying that --overwrite rebuilds it
    started = time.perf_counter()
    manifest = build_index(corpus.documents, out, config, progress=not quiet, overwrite=overwrite)
    if overwrite:
        from hopgraph.index.versions import reset_to_root  # noqa: PLC0415

        if reset_to_root(out):
            click.echo(
                f"{out}: the rebuilt root index is live again (versions from `hopgraph update` are no longer served)",
                err=as_json,
            )
    counts = ", ".join(f"{k}={v}" for k, v in sorted(manifest["counts"].items()))
    ran = [name for name, record in manifest["stages"].items() if earlier.get(name) != record]
    kept = len(manifest["stages"]) - len(ran)
    if as_json:
        click.echo(json.dumps({**corpus.summary(), "index": out, "counts": manifest["counts"]}, indent=2))
        return
    for line in corpus.describe(verbose=verbose):
        click.echo(line)
    click.echo(
        f"indexed {len(corpus.documents)} documents into {out} ({counts}; {time.perf_counter() - started:.1f} s, "
        f"{len(ran)} stage{'s' if len(ran) != 1 else ''} run{f', {kept} finished earlier' if kept else ''})"
    )
    echo_llm_usage({name: record["llm"] for name, record in manifest["stages"].items() if "llm" in record})


@main.command()
@click.argument("index_dir", metavar="INDEX", type=click.Path())
@click.argument("question", required=False)
@click.option(
    "--questions",
    type=click.File("rb"),
    help="File of questions ('-' = stdin), UTF-8: one per line, or JSONL with a 'question' field. Models load once.",
)
@click.option(
    "--where",
    help='Filter as JSON: field → value, list, or operators, e.g. \'{"timestamp": {"gte": "2024-01-01"}}\' '
    "(fields: id, title, source and the metadata keys; operators gt, gte, lt, lte, in, ne, eq).",
)
@click.option(
    "--groups", help="Comma-separated groups of the reader: only documents whose acl names one of them are used."
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the full result as JSON (with --questions or at the prompt: one line per question).",
)
@click.option(
    "--answer",
    "with_answer",
    is_flag=True,
    help="Also answer from the evidence with the LLM at --llm.base_url (answer, citations, evidence path).",
)
@click.option(
    "--full",
    is_flag=True,
    help=f"Print each piece whole (by default the {EXCERPT_CHARS} characters of it that hold most of the question's "
    "words).",
)
@config_file_option("TOML file with [retrieval], [rerank], [answer], [llm] settings (over the index's own).")
@config_options(QUERY_SECTIONS)
def query(
    index_dir: str,
    question: str | None,
    questions: typing.BinaryIO | None,
    where: str | None,
    groups: str | None,
    as_json: bool,
    with_answer: bool,
    full: bool,
    config_file: str | None,
    **options: Any,
) -> None:
    """Retrieve evidence for QUESTION from INDEX and print it with its provenance (and, with --answer, the answer).

    With --questions FILE every question of the file is asked in turn; with neither, on a terminal,
    questions are read interactively until an empty line. Models and the index load once.
    """
    from hopgraph.retrieve.filters import reader_filter, unnamed_groups, why_nothing  # noqa: PLC0415
    from hopgraph.retrieve.partitioned import open_index  # noqa: PLC0415
    from hopgraph.retrieve.retriever import Retriever  # noqa: PLC0415

    asked = questions_to_ask(question, questions)
    loaded = open_index(index_dir)
    config = build_config(config_file, options, loaded.config.model_dump(), "command-line options")
    from hopgraph.retrieve.methods import check_method  # noqa: PLC0415

    check_method(config.retrieval.method, loaded.manifest, index_dir)
    flt, nothing = None, ""
    if where is not None or groups is not None:  # --groups "" is a reader of no group, not the owner
        try:
            condition = json.loads(where) if where else {}
            if not isinstance(condition, dict):
                raise ValueError("give a JSON object of field → condition")
            flt = reader_filter(
                loaded,
                condition,
                groups=None if groups is None else frozenset(g.strip() for g in groups.split(",") if g.strip()),
                max_keys=config.serve.max_filter_keys,
                max_values=config.serve.max_filter_values,
            )
        except ValueError as exc:  # a JSON syntax error is one too
            fail(f"--where: {exc}")
        except RecursionError:
            fail("--where: nested too deeply")
        for group in unnamed_groups(loaded, flt.groups or ()):
            click.secho(f"note: no document's acl names the group {group!r}", fg="yellow", err=True)
        nothing = why_nothing(loaded, flt, groups="--groups", where="--where")
    if nothing and as_json:  # printed results say it in place of the budget hint
        click.secho(f"note: {nothing}: every result is empty", fg="yellow", err=True)
    retriever = Retriever.configured(loaded, config)
    llm = None
    if with_answer:
        from hopgraph.llm import open_llm  # noqa: PLC0415

        llm = open_llm(config.llm)
    failed: LLMUnavailableError | LLMRequestError | None = None
    for text in asked:
        result = retriever.retrieve(text, metadata_filter=flt)
        reply = None
        if llm is not None and failed is None:  # after a failure, the other questions' evidence alone
            from hopgraph.retrieve.answer import answer  # noqa: PLC0415

            try:
                reply = answer(llm, result, config.answer)
            except (LLMUnavailableError, LLMRequestError) as exc:  # evidence shown all the same, the error last
                failed = exc
        if as_json:
            payload = result.to_dict()
            if llm is not None:
                payload["answer"] = reply.to_dict() if reply is not None else None
            single = question is not None
            click.echo(json.dumps(payload, indent=2 if single else None, ensure_ascii=False))
        else:
            print_result(
                result, reply, header=question is None, width=None if full else EXCERPT_CHARS, why_empty=nothing
            )
    if failed is not None:
        raise failed


@main.command(name="eval")
@click.argument("dataset", type=click.Path(exists=True))
@click.option(
    "--index",
    "index_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Index directory for the dataset's corpus (built or resumed first).",
)
@click.option(
    "--methods", default="text,knng,keyword,concept,ppr", show_default=True, help="Comma-separated methods to compare."
)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    help="Only the first N questions (the index still holds the whole corpus, as for the full set).",
)
@click.option(
    "--corpus",
    multiple=True,
    type=click.Path(exists=True),
    help="Documents of your own (files or folders, read as `hopgraph index` reads them; repeat for more): DATASET "
    "is then a JSONL of questions about them (question, answer, optional support: [[document id, sentence], ...]), "
    "e.g. examples/wiki-questions.jsonl with --corpus examples/wiki.",
)
@click.option(
    "--out",
    "out",
    type=click.Path(dir_okay=False),
    help="Result JSON path (a .md table and .png chart are written beside it).",
)
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="TOML file with settings.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bars.")
@click.option("--answers", is_flag=True, help="Also answer every question with the LLM and score EM, F1 and Accuracy.")
@config_options(BUILD_SECTIONS + ("retrieval.", "rerank.", "answer."), exclude=("retrieval.method",))
def evaluate(
    dataset: str,
    index_dir: str,
    methods: str,
    limit: int | None,
    corpus: tuple[str, ...],
    out: str | None,
    config_file: str | None,
    quiet: bool,
    answers: bool,
    **options: Any,
) -> None:
    """Score retrieval methods on DATASET (KET-RAG, HippoRAG, IRCoT or MuSiQue format), or on
    questions of your own about the documents given with --corpus.

    Coverage at λ, supporting-document recall where the questions name them, and EM/F1/Accuracy
    with --answers.
    """
    from hopgraph.evaluate.runner import evaluate as run  # noqa: PLC0415
    from hopgraph.evaluate.runner import write_outputs
    from hopgraph.retrieve.methods import METHODS  # noqa: PLC0415

    chosen = list(dict.fromkeys(m.strip() for m in methods.split(",") if m.strip()))  # each once, in order
    unknown = [m for m in chosen if m not in METHODS]
    if unknown or not chosen:
        raise click.BadParameter(
            f"unknown method(s) {', '.join(unknown)}; choose from {', '.join(METHODS)}"
            if unknown
            else f"no method given; choose from {', '.join(METHODS)}",
            param_hint="--methods",
        )
    config = build_config(config_file, options)
    out_path = result_path(out) if out else None
    payload = run(
        dataset,
        index_dir,
        config,
        chosen,
        limit=limit,
        progress=not quiet,
        answers=answers,
        skipped=lambda why: click.secho(f"skipped: {why}", fg="yellow", err=True),
        corpus=corpus,
    )
    from hopgraph.evaluate.report import markdown_table  # noqa: PLC0415
    from hopgraph.evaluate.runner import result_columns  # noqa: PLC0415

    click.echo(markdown_table(payload["results"], result_columns(payload["results"])))
    if out_path:
        for path in write_outputs(payload, out_path):
            click.echo(f"wrote {path}")


def result_path(out: str) -> Path:
    """``eval --out`` checked before the run, not after it: a result file that cannot be written lost
    the whole run, and a path ending .md was overwritten by the table written beside it."""
    path = Path(out)
    if path.suffix.lower() in (".md", ".png"):
        raise click.BadParameter(
            f"{out} would be overwritten by the {path.suffix.lower()} written beside the result: give the JSON's "
            "path (e.g. ending .json)",
            param_hint="--out",
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise click.BadParameter(
            f"cannot make the folder {path.parent}: {exc.strerror or exc}", param_hint="--out"
        ) from None
    if not os.access(path.parent, os.W_OK) or path.is_dir():
        raise click.BadParameter(f"{out} cannot be written", param_hint="--out")
    return path


MIN_CONCEPT_CHARS = 3


@main.command()
@click.argument("index_dir", metavar="INDEX", type=click.Path())
@click.option(
    "--top",
    default=10,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="How many core chunks and central concepts to list.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object.")
def inspect(index_dir: str, top: int, as_json: bool) -> None:
    """Summarise INDEX: counts, stage times, settings, core chunks and central concepts."""
    from hopgraph.retrieve.partitioned import open_index  # noqa: PLC0415

    summary = index_summary(open_index(index_dir), top)
    if as_json:
        click.echo(json.dumps(summary, indent=2, ensure_ascii=False))
        return
    click.secho(
        f"{index_dir}: version {summary['version'] or 'root'}, format {summary['format_version']}, hopgraph "
        f"{summary['hopgraph_version']}",
        bold=True,
    )
    click.echo("counts: " + ", ".join(f"{k}={v}" for k, v in summary["counts"].items()))
    click.echo(
        "stages: " + ", ".join(f"{k} {v['seconds']:.1f}s{cluster_cost(v)}" for k, v in summary["stages"].items())
    )
    click.echo(f"peak memory: {summary['peak_memory_mb']:.0f} MB; embedding: {summary['embedding_model']}")
    click.echo("build settings: " + json.dumps(summary["build_settings"], sort_keys=True))
    for p in summary.get("partitions", []):
        click.echo(f"partition {p['name']}: acl {p['acl'] or 'none (unrestricted)'}, {p['documents']} documents")
    if "central_concepts" in summary:
        click.echo("central concepts: " + ", ".join(summary["central_concepts"]))
        click.echo("core chunks (KNN PageRank):")
        for chunk in summary["core_chunks"]:
            click.echo(f"  chunk {chunk['chunk']}: {chunk['text'].replace(chr(10), ' ')}…")


def index_summary(opened: Any, top: int) -> dict[str, Any]:
    """What ``inspect`` shows, as data: the manifest's record (``version`` '' for an index without
    versions), and the central concepts and core chunks (or, for an isolated index, its partitions)."""
    import numpy as np  # noqa: PLC0415

    from hopgraph.index.pipeline import STAGES  # noqa: PLC0415
    from hopgraph.retrieve.partitioned import PartitionedIndex  # noqa: PLC0415

    m = opened.manifest
    order = {stage.name: n for n, stage in enumerate(STAGES)}  # the manifest stores them by name
    summary: dict[str, Any] = {
        "version": opened.version,
        "format_version": m["format_version"],
        "hopgraph_version": m["hopgraph_version"],
        "counts": dict(sorted(m["counts"].items())),
        "stages": {  # without each stage's file checksums (the manifest has them)
            name: {k: v for k, v in record.items() if k != "files"}
            for name, record in sorted(m["stages"].items(), key=lambda item: order.get(item[0], len(order)))
        },
        "peak_memory_mb": m.get("peak_memory_mb", 0),
        "embedding_model": m["config"]["embedding"]["model"],
        "build_settings": m["build_settings"],
    }
    if isinstance(opened, PartitionedIndex):  # access.isolation: one sub-index per ACL
        summary["partitions"] = [
            {"name": p.name, "acl": p.acl, "documents": len(p.index.documents["id"])} for p in opened.partitions
        ]
        return summary
    # Numbers and fragments (years, "00") co-occur with everything, so they top the concept
    # PageRank without naming a concept: only words of at least three characters are shown.
    words = (opened.keywords[i] for i in np.argsort(-opened.array("concept_rank")))
    summary["central_concepts"] = [w for w in words if len(w) >= MIN_CONCEPT_CHARS and any(c.isalpha() for c in w)][
        :top
    ]
    summary["core_chunks"] = [
        {"chunk": int(c), "text": opened.chunks["text"][c][:100]}
        for c in np.argsort(-opened.array("chunk_rank_knn"))[:top]
    ]
    return summary


@main.command()
@click.argument("index_dir", metavar="INDEX", type=click.Path())
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    help="TOML file with [serve], [retrieval], [llm], [answer] settings (over the index's own).",
)
@config_options(("serve.",) + QUERY_SECTIONS)
def serve(index_dir: str, config_file: str | None, **options: Any) -> None:
    """Serve INDEX over HTTP: /v1/retrieve, /v1/answer, /v1/documents, /v1/jobs, /v1/index, /healthz, /metrics.

    Every endpoint except /healthz needs a bearer token from serve.tokens_file (TOML: [[tokens]] with
    token, user, groups, admin) or the JSON list in $HOPGRAPH_TOKENS. A reader only ever retrieves
    chunks of documents whose acl names one of their groups (serve.unrestricted_documents decides for
    documents without acl); inserting and deleting documents needs admin. OpenAPI docs at /docs.

    Several processes may serve one index directory (serve.workers on one port, or replicas on other
    machines over shared storage): one of them runs the update jobs, and each serves a newly
    published version within serve.refresh_seconds plus the time to load it.
    """
    import uvicorn  # noqa: PLC0415

    from hopgraph.serve.app import check_address, create_app  # noqa: PLC0415
    from hopgraph.serve.auth import TokenBook  # noqa: PLC0415
    from hopgraph.serve.connections import uvicorn_options  # noqa: PLC0415
    from hopgraph.serve.workers import run_workers  # noqa: PLC0415
    from hopgraph.store import IndexStore, live_root  # noqa: PLC0415

    manifest = IndexStore(live_root(index_dir)).require_complete()
    config = build_config(config_file, options, manifest["config"], "serve settings")  # errors name the file
    # Every request without a method uses the default: one the index cannot answer is refused now.
    from hopgraph.retrieve.methods import check_method  # noqa: PLC0415

    check_method(config.retrieval.method, manifest, index_dir)
    tokens = TokenBook.load(config.serve.tokens_file, config.serve.tokens_env)
    workers = config.serve.workers
    if workers > 1 and config.serve.jobs == "always":
        raise click.UsageError("serve.jobs = 'always' runs jobs in every process: use it with serve.workers = 1")
    check_address(config.serve.host, config.serve.port)  # before loading the index, which can take minutes
    where = f"http://{config.serve.host}:{config.serve.port}"
    # On SIGTERM, in-flight requests get a few seconds to finish; any retrieval still computing
    # stops at its deadline (serve.request_deadline), so the process exits within both bounds.
    server_options: dict[str, Any] = {"log_level": "warning", "timeout_graceful_shutdown": 5}
    if workers > 1:
        click.echo(f"serving {index_dir} at {where} with {workers} processes, each loading it (docs at /docs)")
        run_workers(index_dir, config, tokens, **server_options)
        return
    click.echo(f"loading {index_dir} …")
    app = create_app(index_dir, config, tokens)
    click.echo(f"serving {index_dir} at {where} (docs at /docs; Ctrl-C stops)")
    server_options.update(uvicorn_options(config.serve))
    uvicorn.run(app, host=config.serve.host, port=config.serve.port, **server_options)


@main.command()
@click.argument("path", default="hopgraph.toml", type=click.Path(dir_okay=False))
@click.option("--force", is_flag=True, help="Replace PATH if it exists.")
def init(path: str, force: bool) -> None:
    """Write a commented config file with every setting at its default to PATH (default: hopgraph.toml).

    Edit what you need and pass it to any command as --config PATH.
    """
    from hopgraph.config import example_toml  # noqa: PLC0415
    from hopgraph.files import atomic_write  # noqa: PLC0415

    target = Path(path)
    if target.exists() and not force:
        raise click.UsageError(f"{target} exists; pass --force to replace it")
    text = example_toml()
    atomic_write(target, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    click.echo(f"wrote {target} (every setting at its default); use it with --config {target}")


@main.command()
@click.argument("index_dir", metavar="[INDEX]", type=click.Path(), required=False)
def methods(index_dir: str | None) -> None:
    """List the retrieval methods: name, the index stages each needs, and (given INDEX) whether INDEX has them."""
    from hopgraph.retrieve.methods import SPECS, how_built  # noqa: PLC0415

    loaded = None
    if index_dir:
        from hopgraph.retrieve.partitioned import open_index  # noqa: PLC0415

        loaded = open_index(index_dir)
    for spec in SPECS.values():
        needs = ", ".join(spec.needs) or "no LLM"
        missing = [] if loaded is None else spec.missing(loaded.manifest)
        here = "" if loaded is None else (f"  [not built: {how_built(missing)}]" if missing else "  [offered]")
        settings = f" [retrieval.{spec.settings}]" if spec.settings else ""
        click.echo(f"{spec.name:<8} ({needs}){here}  {spec.description}{settings}")


@main.command(name="llm-server")
@click.option(
    "--model",
    default="smollm2-135m",
    show_default=True,
    help="smollm2-135m (tests), qwen2.5-coder-0.5b (demos, needs the 'qwen' extra) or a local .gguf file.",
)
@click.option("--port", default=8000, show_default=True, help="Port on 127.0.0.1.")
@click.option("--context", default=8192, show_default=True, help="Context tokens per parallel request.")
@click.option("--parallel", default=2, show_default=True, help="Requests served at once.")
def llm_server(model: str, port: int, context: int, parallel: int) -> None:
    """Serve a CPU stand-in for `vllm serve` (llama.cpp, OpenAI-compatible API) on 127.0.0.1 until stopped.

    Point hopgraph at it with --llm.base_url http://127.0.0.1:PORT/v1; with llm.concurrency 0 (the
    default) hopgraph reads the --parallel slots from it and sends that many requests at once.
    Production uses `vllm serve MODEL_DIR` the same way.
    """
    from hopgraph.llm.standin import model_path, serve  # noqa: PLC0415

    model_path(model)  # a clear error before "serving" is printed
    click.echo(f"serving {model} at http://127.0.0.1:{port}/v1 with {parallel} slots (Ctrl-C stops)")
    serve(model, port=port, context=context, parallel=parallel)


if __name__ == "__main__":
    main()
