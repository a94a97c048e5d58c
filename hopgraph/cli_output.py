"""What the command line prints, the inputs `index`/`update` read (skipped ones named), and the questions
`hopgraph query` reads (argument, file or prompt)."""

from __future__ import annotations

import json
import sys
import typing
from typing import TYPE_CHECKING, Any

import click

from hopgraph.errors import InputError

if TYPE_CHECKING:
    from hopgraph.index.ingest import IngestResult


def cluster_cost(record: dict[str, Any]) -> str:
    """What a stage spent on the Ray cluster, e.g. " (412.0 worker-s, 380.5 GPU-s)"; empty for the local engine."""
    labels = (("worker_seconds", "worker-s"), ("gpu_seconds", "GPU-s"))
    spent = [f"{record[key]:.1f} {label}" for key, label in labels if key in record]
    return f" ({', '.join(spent)})" if spent else ""


def echo_llm_usage(usage: dict[str, dict[str, Any]]) -> None:
    for name, u in usage.items():
        click.echo(
            f"{name}: {u['calls']} LLM calls ({u['new_calls']} new, {u['cached_calls']} cached), "
            f"{u['prompt_tokens']} prompt + {u['completion_tokens']} completion tokens, {u['parse_failures']} "
            f"parse failures, {u['fallbacks']} fallbacks"
        )


def questions_to_ask(question: str | None, source: typing.TextIO | None) -> typing.Iterator[str]:
    """The questions to ask: the argument, the lines of --questions, or a prompt on a terminal
    (checked now, read as they are asked)."""
    if question is not None and source is not None:
        raise click.UsageError("give QUESTION or --questions FILE, not both")
    if question is None and source is None and not sys.stdin.isatty():
        raise click.UsageError(
            "give QUESTION, or --questions FILE ('-' reads stdin); on a terminal, questions are asked"
        )
    return iter([question]) if question is not None else read_questions(source)


def read_questions(source: typing.TextIO | None) -> typing.Iterator[str]:
    if source is None:
        try:
            while text := click.prompt("question (empty line ends)", default="", show_default=False).strip():
                yield text
        except click.Abort:  # Ctrl-D or Ctrl-C at the prompt: done asking
            click.echo()
        return
    for number, line in enumerate(source, 1):
        text = line.strip()
        if text.startswith("{"):
            try:
                text = str(json.loads(text).get("question") or "").strip()
            except (ValueError, AttributeError) as exc:
                raise InputError(f"{source.name}:{number}: not a JSON object with a 'question' ({exc})") from None
        if text:
            yield text


def print_result(result: Any, reply: Any, header: bool) -> None:
    from hopgraph.retrieve.packing import source_names  # noqa: PLC0415  (the CLI starts without retrieval code)

    if header:
        click.secho(f"\n=== {result.query}", bold=True)
    if reply is not None:
        click.secho(f"answer: {reply.text}", bold=True, fg="green" if reply.found else "yellow")
        for c in reply.citations:
            names = source_names(c["doc_ids"], c["titles"], c.get("places"))
            click.echo(f"  [{c['evidence']}] chunk {c['chunk']} of {', '.join(names)}  path: {c['path']}")
    click.secho(
        f"{result.method}: {len(result.evidence)} pieces, {result.tokens}/{result.budget} tokens, "
        f"{result.seconds * 1000:.1f} ms",
        bold=True,
    )
    for rank, ev in enumerate(result.evidence[:10], 1):
        source = ", ".join(ev.sources())
        click.secho(
            f"\n[{rank}] {ev.kind} {ev.index} (chunk {ev.chunk}) score={ev.score:.3f}  path: {ev.path}", fg="cyan"
        )
        click.echo(f"    source: {source}")
        click.echo("    " + ev.text[:400].replace("\n", " ") + ("…" if len(ev.text) > 400 else ""))
    if len(result.evidence) > 10:
        click.echo(f"\n… {len(result.evidence) - 10} more pieces (use --json for all)")


def read_inputs(paths: tuple[str, ...], root: str | None, index_dir: str | None, *, progress: bool) -> IngestResult:
    """Read PATHS (an update reuses the ids of files INDEX already holds), naming every skipped input on stderr."""
    from hopgraph.index.ingest import read_corpus  # noqa: PLC0415

    known = None
    if index_dir is not None and root is None:
        from hopgraph.index.catalog import file_ids  # noqa: PLC0415

        known = file_ids(index_dir)
    corpus = read_corpus(paths, root=root, known_ids=known, progress=progress)
    for problem in corpus.problems:
        click.secho(f"skipped: {problem}", fg="yellow", err=True)
    if index_dir is not None:
        from hopgraph.index.catalog import namesakes  # noqa: PLC0415

        for new, old in namesakes(index_dir, [d.id for d in corpus.documents]):
            click.secho(
                f"note: {new!r} is a new id beside {old!r}; to replace {old!r}, give --root (the folder its path is "
                "relative to)",
                fg="yellow",
                err=True,
            )
    return corpus
