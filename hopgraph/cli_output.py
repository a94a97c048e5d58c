"""What the command line prints, the inputs `index`/`update` read (skipped ones named), and the questions
`hopgraph query` reads (argument, file or prompt)."""

from __future__ import annotations

import codecs
import json
import re
import sys
import typing
from typing import TYPE_CHECKING, Any

import click

from hopgraph.errors import InputError, cut

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


def questions_to_ask(question: str | None, source: typing.BinaryIO | None) -> typing.Iterator[str]:
    """The questions to ask: the argument, the lines of --questions, or a prompt on a terminal
    (checked now; a file is read whole now, a pipe or the prompt as the questions are asked)."""
    if question is not None and source is not None:
        raise click.UsageError("give QUESTION or --questions FILE, not both")
    if question is None and source is None and not sys.stdin.isatty():
        raise click.UsageError(
            "give QUESTION, or --questions FILE ('-' reads stdin); on a terminal, questions are asked"
        )
    if question is not None and not question.strip():
        raise InputError("QUESTION is empty: give the question to retrieve evidence for")
    if question is not None:
        return iter([question])
    if source is not None and source.seekable():  # a file: every line checked before models load
        return iter(list(read_questions(source)))
    return read_questions(source)


def read_questions(source: typing.BinaryIO | None) -> typing.Iterator[str]:
    """Questions one per line: plain text, or a JSON object (a line starting with "{") with a
    non-empty 'question'. Blank lines separate; any other line that yields no question is an error
    naming it, so batch output lines up with the input."""
    if source is None:
        try:
            while text := click.prompt("question (empty line ends)", default="", show_default=False).strip():
                yield text
        except click.Abort:  # Ctrl-D or Ctrl-C at the prompt: done asking
            click.echo()
        return
    name = getattr(source, "name", "--questions")
    offset = 0  # bytes before this line, so an undecodable byte is named where a hex editor shows it
    for number, raw in enumerate(source, 1):
        start = len(codecs.BOM_UTF8) if number == 1 and raw.startswith(codecs.BOM_UTF8) else 0
        try:
            line = raw[start:].decode("utf-8")
        except UnicodeDecodeError as exc:
            at = offset + start + exc.start
            raise InputError(
                f"{name}:{number}: not UTF-8 (byte 0x{raw[start + exc.start]:02x} at offset {at}); "
                "save the questions as UTF-8"
            ) from None
        offset += len(raw)
        text = line.strip()
        if not text:
            continue
        if text.startswith("{"):
            text = _json_question(text, f"{name}:{number}")
        yield text


def _json_question(line: str, where: str) -> str:
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise InputError(f"{where}: not a JSON object with a 'question' ({exc})") from None
    except RecursionError:
        raise InputError(f"{where}: not a JSON object with a 'question' (nested too deeply)") from None
    if not isinstance(record, dict):
        raise InputError(f"{where}: not a JSON object with a 'question'")
    question = record.get("question")
    if not isinstance(question, str):
        what = "no 'question' field" if question is None else f"'question' is {type(question).__name__}, not text"
        raise InputError(f"{where}: {what} (keys: {cut(', '.join(map(str, record)) or 'none')})")
    if not question.strip():
        raise InputError(f"{where}: 'question' is empty")
    return question.strip()


EXCERPT_CHARS = 400
_SENTENCE_START = re.compile(r"(?<=[.!?])\s+")


def excerpt(text: str, query: str, width: int | None = EXCERPT_CHARS) -> str:
    """``text`` on one line, or with ``width`` the part of it that holds most of the question's words
    (from a sentence start): a piece often opens inside the document before the one it is about."""
    flat = text.replace("\n", " ")
    if width is None or len(flat) <= width:
        return flat
    from hopgraph.text import WORD  # noqa: PLC0415
    from hopgraph.text import words as keywords  # noqa: PLC0415

    words = set(keywords(query))  # stop words ("the", "who") say nothing of where the answer is

    def fit(at: int) -> tuple[int, int]:  # the question's words held, then how soon the first comes
        # Each word tokenised as the question was (lower case first: "İSTANBUL" is "stanbul" there).
        found = [
            (m.start(), hit) for m in WORD.finditer(flat, at, at + width) if (hit := words & set(keywords(m.group())))
        ]
        return len(set().union(*(hit for _, hit in found))), -(found[0][0] - at if found else width)

    best = max([0, *(m.end() for m in _SENTENCE_START.finditer(flat))], key=fit)
    return ("…" if best else "") + flat[best : best + width] + ("…" if best + width < len(flat) else "")


def print_result(result: Any, reply: Any, header: bool, width: int | None = EXCERPT_CHARS, why_empty: str = "") -> None:
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
        click.echo("    " + excerpt(ev.text, result.query, width))
    if len(result.evidence) > 10:
        click.echo(f"\n… {len(result.evidence) - 10} more pieces (use --json for all)")
    if not result.evidence and why_empty:
        click.echo(why_empty)
    elif not result.evidence:
        click.echo(
            f"no piece fits a budget of {result.budget} tokens and the filters given: raise --retrieval.budget "
            "(a piece is a sub-chunk, a chunk or a knowledge unit: often 100 to 1,200 tokens)"
        )


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
