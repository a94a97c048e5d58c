"""Corpus reading: good files keep their metadata, and every kind of bad input is reported, not fatal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hopgraph.errors import InputError
from hopgraph.index.ingest import InputProblem, read_corpus, read_upload

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"


def _lines(*records: object) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records)


def test_txt_md_and_jsonl_with_metadata(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("Plain notes.\n", encoding="utf-8")
    guide = tmp_path / "guide.md"
    guide.write_text("intro line\n\n#   Install Guide ##\n\n## Later\n", encoding="utf-8")
    records = tmp_path / "records.jsonl"
    records.write_text(
        _lines(
            {
                "id": "r1",
                "text": "First record.",
                "title": "One",
                "acl": ["hr", "legal"],
                "timestamp": "2024-05-01T12:00:00Z",
                "author": "kim",
                "metadata": {"team": "ops"},
            },
            "",
            {"text": "Second record.", "acl": "public"},
        ),
        encoding="utf-8",
    )
    result = read_corpus([notes, guide, records], default_metadata={"tenant": "acme", "team": "default"})
    assert result.problems == []
    by_id = {d.id: d for d in result.documents}
    assert list(by_id) == ["notes.txt", "guide.md", "r1", "records.jsonl:3"]
    assert by_id["notes.txt"].title == "notes" and by_id["notes.txt"].text == "Plain notes.\n"
    assert by_id["guide.md"].title == "Install Guide"
    meta = by_id["notes.txt"].metadata
    assert meta["source_path"] == str(notes.resolve()) and meta["tenant"] == "acme"
    assert meta["modified"].endswith("+00:00") and meta["modified"][:4].isdigit()
    first = by_id["r1"]
    assert first.title == "One" and first.acl == ["hr", "legal"]
    assert first.metadata["timestamp"] == "2024-05-01T12:00:00Z"
    assert (first.metadata["author"], first.metadata["team"], first.metadata["tenant"]) == ("kim", "ops", "acme")
    assert by_id["records.jsonl:3"].acl == ["public"]


def test_folder_walk_is_recursive_sorted_and_lists_what_it_skips(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "deep.md").write_text("# Deep\ntext", encoding="utf-8")
    (tmp_path / "a.txt").write_text("alpha", encoding="utf-8")
    (tmp_path / "image.png").write_bytes(b"\x89PNG")  # unknown extension: listed as skipped
    (tmp_path / "config.json").write_text('{"not": "a benchmark"}', encoding="utf-8")
    (tmp_path / ".hidden.txt").write_text("secret", encoding="utf-8")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD.txt").write_text("ref", encoding="utf-8")
    result = read_corpus([tmp_path])
    assert [d.id for d in result.documents] == ["a.txt", "b/deep.md"]
    assert result.documents[1].title == "Deep"
    skipped = {Path(p.path).name: p.reason for p in result.problems}
    assert sorted(skipped) == [".git", ".hidden.txt", "config.json", "image.png"]
    assert skipped["image.png"].startswith("unsupported file type '.png'")
    assert "not benchmark data" in skipped["config.json"] and "hidden" in skipped[".git"]


def test_unknown_extension_named_directly_is_a_problem(tmp_path: Path) -> None:
    good = tmp_path / "good.txt"
    good.write_text("fine", encoding="utf-8")
    odd = tmp_path / "table.csv"
    odd.write_text("a,b", encoding="utf-8")
    result = read_corpus([odd, good])
    assert [d.id for d in result.documents] == ["good.txt"]
    assert [(p.path, p.line) for p in result.problems] == [(str(odd), None)]
    assert "unsupported file type" in result.problems[0].reason


def test_every_bad_input_is_reported_and_good_files_survive(tmp_path: Path) -> None:
    files = {
        "empty.txt": b"",
        "blank.md": b"  \n\t\n",
        "binary.txt": b"abc\x00def",
        "latin.txt": "line one\ncaf\xe9".encode("latin-1"),
        "big.txt": b"x" * 2000,
        "good.txt": b"still read",
        "records.jsonl": _lines(
            {"id": "ok", "text": "kept"},
            '{"text": "broken",',
            {"id": "nt", "title": "no text"},
            {"text": "   "},
            {"text": "bad acl", "acl": 7},
            {"text": "bad acl list", "acl": ["ok", 3]},
            {"text": "bad id", "id": ["x"]},
            {"text": "bad time", "timestamp": "yesterday"},
            {"text": "bad meta", "metadata": [1]},
            ["not", "an", "object"],
            # JSON may spell a lone surrogate; no UTF-8 table or job file can hold it.
            '{"text": "fine", "metadata": {"team": "a\\ud800"}}',
        ).encode("utf-8"),
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "dangling.txt").symlink_to(tmp_path / "missing.txt")  # inside a folder: skipped, named
    result = read_corpus([tmp_path], max_file_bytes=1000)
    assert sorted(d.id for d in result.documents) == ["good.txt", "latin.txt", "ok"]
    found = {(Path(p.path).name, p.line): p.reason for p in result.problems}
    assert found[("empty.txt", None)] == "empty file"
    assert found[("blank.md", None)] == "empty file"
    assert "binary" in found[("binary.txt", None)]
    assert "over the 1,000-byte limit" in found[("big.txt", None)]
    assert "broken link" in found[("dangling.txt", None)]
    assert "invalid JSON" in found[("records.jsonl", 2)]
    assert "'text'" in found[("records.jsonl", 3)] and "'text'" in found[("records.jsonl", 4)]
    assert "'acl'" in found[("records.jsonl", 5)] and "'acl'" in found[("records.jsonl", 6)]
    assert "'id'" in found[("records.jsonl", 7)]
    assert "ISO-8601" in found[("records.jsonl", 8)]
    assert "'metadata'" in found[("records.jsonl", 9)]
    assert "not a JSON object" in found[("records.jsonl", 10)]
    assert "'metadata.team' holds a lone surrogate" in found[("records.jsonl", 11)]
    assert len(result.problems) == 15
    assert str(InputProblem("f.jsonl", 3, "why")) == "f.jsonl:3: why"


def test_duplicate_ids_keep_the_first(tmp_path: Path) -> None:
    path = tmp_path / "dup.jsonl"
    path.write_text(_lines({"id": "same", "text": "one"}, {"id": "same", "text": "two"}), encoding="utf-8")
    result = read_corpus([path])
    assert [d.text for d in result.documents] == ["one"]
    (problem,) = result.problems
    assert (Path(problem.path).name, problem.line) == ("dup.jsonl", 2)
    assert "duplicate document id 'same'" in problem.reason


def test_a_named_path_that_does_not_exist_is_an_error_before_reading(tmp_path: Path) -> None:
    # Inside a folder a missing file is one problem among many; named by the caller, it is a typo.
    good = tmp_path / "notes.txt"
    good.write_text("Plain notes.\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"nosuch\.txt: no such file or directory$"):
        read_corpus([good, tmp_path / "nosuch.txt"])
    with pytest.raises(InputError, match=r"no such files or directories: .*a\.txt; .*b\.txt$"):
        read_corpus([tmp_path / "a.txt", good, tmp_path / "b.txt"])


def test_nothing_readable_raises_input_error_listing_problems(tmp_path: Path) -> None:
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "bad.jsonl").write_text("{oops\n", encoding="utf-8")
    with pytest.raises(InputError) as caught:
        read_corpus([tmp_path])
    message = str(caught.value)
    assert "no document could be read" in message
    assert "bad.jsonl:1: invalid JSON" in message and "empty.txt: empty file" in message
    (tmp_path / "void").mkdir()
    with pytest.raises(InputError, match=r"no files of the kinds read \(.txt, .md, .+, .pdf, .docx, .html"):
        read_corpus([tmp_path / "void"])


def test_benchmark_inputs_are_recognised_by_content(tmp_path: Path) -> None:
    bench = tmp_path / "corpus" / "ketrag"
    bench.mkdir(parents=True)
    (bench / "document.txt").write_text("para zero\npara one\n", encoding="utf-8")
    (bench / "qa-pairs.json").write_text('[{"id": "q", "question": "Q?", "answer": "zero"}]', encoding="utf-8")
    hippo = tmp_path / "corpus" / "hippo"
    hippo.mkdir()
    (hippo / "toy_corpus.json").write_text('[{"title": "T", "text": "titled text"}]', encoding="utf-8")
    (hippo / "toy.json").write_text('[{"id": "h", "question": "Q?", "answer": "x"}]', encoding="utf-8")
    renamed = tmp_path / "corpus" / "questions.jsonl"  # IRCoT content under a neutral name
    renamed.write_text(
        _lines(
            {
                "question_id": "i",
                "question_text": "Q?",
                "answers_objects": [],
                "contexts": [{"title": "C", "paragraph_text": "context text"}],
            }
        ),
        encoding="utf-8",
    )
    result = read_corpus([tmp_path / "corpus"], default_metadata={"tenant": "lab"})
    assert result.problems == []
    texts = [d.text for d in result.documents]
    assert texts == ["titled text", "para zero", "para one", "context text"]
    assert result.documents[1].id == "p00000" and result.documents[1].metadata["line"] == 0
    assert all(d.metadata["tenant"] == "lab" and d.metadata["source_path"] for d in result.documents)
    assert result.documents[0].title == "T" and result.documents[3].title == "C"


@pytest.mark.skipif(not DATA.is_dir(), reason="shared benchmark data not present")
def test_real_benchmark_folder_reads_all_corpora() -> None:
    result = read_corpus([DATA / "musique" / "ketrag_500", DATA / "hotpotqa" / "dev_subsampled.jsonl"])
    assert len(result.documents) == 6761 + 4858 and result.problems == []


def test_records_nested_too_deep_are_skipped_with_their_line(tmp_path: Path) -> None:
    # 40 levels: refused by the bound; 100,000: past what Python's JSON parser itself can read.
    (tmp_path / "notes.jsonl").write_text(
        _lines(
            {"id": "kept", "text": "A readable note."},
            '{"id": "deep", "text": "A note.", "tags": ' + "[" * 40 + "]" * 40 + "}",
            '{"id": "deeper", "text": "A note.", "tags": ' + "[" * 100_000 + "]" * 100_000 + "}",
        ),
        encoding="utf-8",
    )
    result = read_corpus([tmp_path])
    assert [d.id for d in result.documents] == ["kept"]
    assert [(p.line, "nested more than 32 levels deep" in p.reason) for p in result.problems] == [(2, True), (3, True)]


def test_a_named_pipe_or_device_is_skipped_not_read(tmp_path: Path) -> None:
    import os

    (tmp_path / "ok.txt").write_text("A readable note.", encoding="utf-8")
    os.mkfifo(tmp_path / "pipe.txt")  # reading it waited forever
    os.mkfifo(tmp_path / "pipe.jsonl")  # so did looking for benchmark records in it
    (tmp_path / "zero.txt").symlink_to("/dev/zero")  # reading it filled the memory (5 GB in 5 s)
    named = [tmp_path / name for name in ("pipe.txt", "pipe.jsonl", "zero.txt", "ok.txt")]
    result = read_corpus(named)
    assert [d.id for d in result.documents] == ["ok.txt"]
    assert [(Path(p.path).name, p.reason) for p in result.problems] == [
        (name, "not a regular file (a device or a pipe)") for name in ("pipe.txt", "pipe.jsonl", "zero.txt")
    ]


def test_a_file_that_grows_past_the_limit_while_it_is_read_is_skipped(tmp_path: Path) -> None:
    from hopgraph.index.ingest import _Reader

    grown = tmp_path / "log.txt"
    grown.write_text("Short at first.", encoding="utf-8")
    reader = _Reader(100, {}, {})
    reader.plan(grown, tmp_path)
    grown.write_text("Appended to while the corpus is read. " * 50, encoding="utf-8")
    reader.run(progress=False)
    assert reader.documents == []
    assert [p.reason for p in reader.problems] == ["file grew past the 100-byte limit while it was read"]


def test_file_names_that_cannot_be_ids_are_skipped_and_named_on_one_line(tmp_path: Path) -> None:
    import os

    (tmp_path / "ok.txt").write_text("A readable note.", encoding="utf-8")
    # Not UTF-8: the id could not be written to a table (a traceback in the chunk stage).
    with open(os.path.join(os.fsencode(tmp_path), b"caf\xe9.txt"), "w", encoding="utf-8") as handle:
        handle.write("Another note.")
    (tmp_path / "two\nlines.txt").write_text("A third note.", encoding="utf-8")  # garbled every listing
    result = read_corpus([tmp_path])
    assert [d.id for d in result.documents] == ["ok.txt"]
    assert sorted(str(p).removeprefix(f"{tmp_path}/") for p in result.problems) == [
        "caf\udce9.txt: file name is not valid UTF-8 (rename the file to read it)",
        "two\\nlines.txt: file name holds the control character U+000A (rename the file to read it)",
    ]


def test_jsonl_ids_with_control_characters_are_refused(tmp_path: Path) -> None:
    (tmp_path / "r.jsonl").write_text(
        _lines({"id": "a\nb", "text": "One."}, {"id": "a\u0000b", "text": "Two."}, {"id": "a/b", "text": "Three."}),
        encoding="utf-8",
    )
    result = read_corpus([tmp_path])
    assert [d.id for d in result.documents] == ["a/b"]
    assert [str(p).removeprefix(f"{tmp_path}/") for p in result.problems] == [
        "r.jsonl:1: 'id' holds the control character U+000A",
        "r.jsonl:2: 'id' holds the control character U+0000",
    ]


def test_json_nested_too_deep_for_python_is_a_problem_not_a_traceback(tmp_path: Path) -> None:
    deep = "[" * 100_000 + "]" * 100_000  # past Python's parser: RecursionError while looking for benchmarks
    (tmp_path / "a.jsonl").write_text(deep + "\n" + json.dumps({"text": "Kept."}) + "\n", encoding="utf-8")
    (tmp_path / "b_corpus.json").write_text(deep, encoding="utf-8")
    result = read_corpus([tmp_path])
    assert [d.id for d in result.documents] == ["a.jsonl:2"]
    reasons = sorted(str(p).removeprefix(f"{tmp_path}/") for p in result.problems)
    assert reasons[0] == "a.jsonl:1: JSON nested more than 32 levels deep"
    assert (
        reasons[1].startswith("b_corpus.json: benchmark data could not be read: ") and "nested too deep" in reasons[1]
    )


def test_a_jsonl_integer_past_pythons_digit_limit_is_a_problem_line(tmp_path: Path) -> None:
    """int("9" * 5000) raises ValueError (not JSONDecodeError): it was a traceback out of `hopgraph index`."""
    lines = ['{"text": "Big.", "n": ' + "9" * 5000 + "}", json.dumps({"text": "Kept."})]
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = read_corpus([tmp_path])
    assert [d.id for d in result.documents] == ["a.jsonl:2"]
    [problem] = [str(p).removeprefix(f"{tmp_path}/") for p in result.problems]
    assert problem.startswith("a.jsonl:1: unreadable JSON (")


def test_benchmark_records_nested_past_the_json_bound_are_refused(tmp_path: Path) -> None:
    """The bound every other JSON input has (32 levels), not only Python's parser's (~1,000)."""
    nested: object = "deep"
    for _ in range(40):
        nested = [nested]
    record = {"title": "Oslo", "text": "Alpha lives in Oslo.", "extra": nested}
    (tmp_path / "b_corpus.json").write_text(json.dumps([record]), encoding="utf-8")
    (tmp_path / "a.txt").write_text("Kept.", encoding="utf-8")
    result = read_corpus([tmp_path])
    assert [d.id for d in result.documents] == ["a.txt"]
    [problem] = [str(p) for p in result.problems]
    assert "b_corpus.json record 1: 'extra.0.0" in problem and "nested more than 32 levels deep" in problem


def test_benchmark_paragraphs_follow_the_text_rule_of_every_input(tmp_path: Path) -> None:
    corpus = [
        {"title": "Oslo", "text": "Alpha lives in Oslo."},
        {"title": "Blank", "text": "  "},
        {"title": "Binary", "text": "a\u0000b"},
    ]
    (tmp_path / "x_corpus.json").write_text(json.dumps(corpus), encoding="utf-8")
    questions = [{"question": "Who?", "answer": "Alpha", "paragraphs": 5, "supporting_facts": 3}]
    (tmp_path / "x.json").write_text(json.dumps(questions), encoding="utf-8")  # malformed support: ignored
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "y_corpus.json").write_text('[{"title": "T", "text": "x \\ud800"}]', encoding="utf-8")
    result = read_corpus([tmp_path])
    assert [d.text for d in result.documents] == ["Alpha lives in Oslo."]
    assert len(result.problems) == 3
    by_title = sorted(p.reason.split(" (", 1)[1] for p in result.problems if p.reason.startswith("paragraph"))
    assert by_title == [
        "'Binary'): text contains the control character U+0000 at character 1",
        "'Blank'): text is empty or only whitespace",
    ]
    [surrogate] = [p.reason for p in result.problems if not p.reason.startswith("paragraph")]
    assert surrogate.startswith("benchmark data could not be read: ") and surrogate.endswith(
        "y_corpus.json record 1: 'text' holds a lone surrogate (not Unicode text)"
    )


def test_ids_are_stored_composed_and_titles_on_one_line(tmp_path: Path) -> None:
    """macOS names files decomposed ("e" + U+0301): the id is the composed "é" a user types, and a
    record spelling the same id the other way is the same document (a duplicate)."""
    (tmp_path / "cafe\u0301.md").write_text("The cafe opened in 1931.")
    records = [{"id": "cafe\u0301.md", "text": "Again."}, {"id": "n", "text": "Note.", "title": "Two\nlines"}]
    (tmp_path / "more.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    result = read_corpus([tmp_path])
    assert [(d.id, d.title) for d in result.documents] == [("caf\u00e9.md", "café"), ("n", "Two lines")]
    assert any("duplicate document id" in str(p) for p in result.problems)


def test_a_folder_reached_twice_is_read_where_it_is_and_the_other_way_is_named(tmp_path: Path) -> None:
    """A link to a sibling folder gave its files the link's ids (the link sorts first), and the real
    folder, a symlink loop too, were skipped without a word."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "water-board.txt").write_text("The Orrin Basin Water Board meets monthly.")
    (tmp_path / "link").symlink_to(tmp_path / "sub")
    (tmp_path / "sub" / "loop").symlink_to(tmp_path / "sub")
    (tmp_path / "a-board.txt").symlink_to(tmp_path / "sub" / "water-board.txt")  # a file link sorts first too
    result = read_corpus([tmp_path])
    assert [d.id for d in result.documents] == ["sub/water-board.txt"]
    reasons = {Path(p.path).name: p.reason for p in result.problems}
    assert reasons == {
        "link": f"the same folder as {tmp_path / 'sub'}, read once",
        "loop": f"the same folder as {tmp_path / 'sub'}, read once",
        "a-board.txt": f"the same file as {tmp_path / 'sub' / 'water-board.txt'}, read once",
    }
    named = read_corpus([tmp_path / "link", tmp_path / "sub"], root=tmp_path)  # a linked folder named first
    assert [d.id for d in named.documents] == ["sub/water-board.txt"]


def test_a_linked_benchmark_folder_is_read_as_a_benchmark(tmp_path: Path) -> None:
    bench = tmp_path / "data" / "ketrag"
    bench.mkdir(parents=True)
    (bench / "document.txt").write_text("para zero\npara one\n", encoding="utf-8")
    (bench / "qa-pairs.json").write_text('[{"id": "q", "question": "Q?", "answer": "zero"}]', encoding="utf-8")
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "bench").symlink_to(bench)
    result = read_corpus([tmp_path / "corpus"])
    assert [d.text for d in result.documents] == ["para zero", "para one"] and result.problems == []


@pytest.mark.parametrize(
    "text, title",
    [
        ("Setup notes.\n\n## Steps\n\n```bash\n# install the toolchain\napt-get install gcc\n```\n", "setup"),
        ("~~~~\n# not this\n~~~\n# nor this\n~~~~\n\n# Real Title #\n", "Real Title"),
        ("```python\n# unclosed fence to the end\n", "setup"),
        ("    # indented code\n\n# Heading\n", "Heading"),
        ("---\n# draft: true\ntags: [a]\n---\nBody text.\n", "setup"),
        ("---\ntitle: 'Field Notes'\n# a comment\n---\n# Other\n", "Field Notes"),
        ("---\ntitle:\n...\n# After Front Matter\n", "After Front Matter"),
        ("---\ntitle: >\n  folded\n---\n# Heading\n", "Heading"),
        ("---\ntitle: null\n---\n# Heading\n", "Heading"),
        ('---\ntitle: "Quoted" # a comment\n---\n', "Quoted"),
        ("---\n\n# Opened by a rule\n\ntext\n---\n# Second\n", "Opened by a rule"),
        ("---\ntitle: 'It''s here'\n---\n", "It's here"),
        ('---\ntitle: "a \\"b\\" c"\n---\n', 'a "b" c'),
    ],
    ids=[
        "comment-in-code",
        "longer-fence",
        "unclosed",
        "indented",
        "front-matter",
        "front-title",
        "empty-title",
        "block-scalar",
        "null-title",
        "quoted-with-comment",
        "rule-not-front-matter",
        "single-quote-escaped",
        "double-quote-escaped",
    ],
)
def test_a_markdown_title_is_a_heading_outside_code(text, title):
    """A shell comment in a fenced block ("# install the toolchain") became the title of a .md without
    an H1: embedded with every chunk, cited, listed."""
    assert read_upload("setup.md", text.encode()).documents[0].title == title


@pytest.mark.parametrize(
    "line, title",
    [("# a" + " " * 100_000 + "b", "a…"), ("#" + " " * 100_000 + "\n# Title", "Title")],
    ids=["heading-with-spaces", "spaces-only"],
)
def test_a_long_markdown_line_of_spaces_is_read_at_once(line, title, tmp_path):
    """The heading pattern backtracked quadratically: a line of 100,000 spaces held `hopgraph index`
    (and an upload's reader) for about 80 s, a megabyte for an hour. Read in a child process (a
    regular expression holds the interpreter: no thread or alarm can interrupt it); 20 s is a hang
    bound, not a speed claim: the reading takes milliseconds."""
    page = tmp_path / "long.md"
    page.write_text(line, encoding="utf-8")
    reading = "import sys; from hopgraph.index.ingest import read_upload; from pathlib import Path; "
    reading += "print(read_upload('long.md', Path(sys.argv[1]).read_bytes()).documents[0].title.split()[0])"
    done = subprocess.run([sys.executable, "-c", reading, str(page)], capture_output=True, text=True, timeout=20)
    assert done.stdout.strip() == title, done.stderr[-2000:]


def test_a_deep_folder_tree_is_read_whole(tmp_path: Path) -> None:
    """Folders were walked by recursion: 600 nested ones ended in a RecursionError (a traceback
    naming no file) and every other file was lost with it."""
    (tmp_path / "top.txt").write_text("at the top", encoding="utf-8")
    deep = tmp_path.joinpath(*["a"] * 600)
    deep.mkdir(parents=True)
    (deep / "x.txt").write_text("far down", encoding="utf-8")
    result = read_corpus([tmp_path])
    assert sorted(d.text for d in result.documents) == ["at the top", "far down"] and result.problems == []


def test_a_folder_whose_name_is_not_utf8_gives_a_source_path_a_table_can_hold(tmp_path: Path) -> None:
    """The source path kept the folder name's stray byte as a lone surrogate: the build then failed
    writing the documents table, with a UnicodeEncodeError traceback."""
    folder = Path(os.fsdecode(bytes(tmp_path) + b"/dir\xff/docs"))
    folder.mkdir(parents=True)
    (folder / "a.txt").write_text("a note", encoding="utf-8")
    (document,) = read_corpus([folder]).documents
    assert document.id == "a.txt" and document.metadata["source_path"].endswith("/dir\\xff/docs/a.txt")


def test_files_beside_a_benchmark_folders_data_are_listed_as_not_read(tmp_path: Path) -> None:
    bench = tmp_path / "wiki"
    bench.mkdir()
    (bench / "document.txt").write_text("para zero\npara one\n", encoding="utf-8")
    (bench / "qa-pairs.json").write_text('[{"id": "q", "question": "Q?", "answer": "zero"}]', encoding="utf-8")
    (bench / "notes.md").write_text("# Notes\nkept apart", encoding="utf-8")
    result = read_corpus([tmp_path])
    assert [d.text for d in result.documents] == ["para zero", "para one"]
    assert [(Path(p.path).name, p.reason.split(":")[0]) for p in result.problems] == [("notes.md", "not read")]


def test_a_broken_questions_file_does_not_lose_the_passages_beside_it(tmp_path: Path) -> None:
    """Indexing reads the passages alone, yet a questions record without "question" (or a
    qa-pairs.json that is no JSON) skipped the whole corpus."""
    hippo = tmp_path / "hippo"
    hippo.mkdir()
    (hippo / "toy_corpus.json").write_text('[{"title": "T", "text": "titled text"}]', encoding="utf-8")
    (hippo / "toy.json").write_text('[{"id": "h", "answer": "x"}]', encoding="utf-8")
    ket = tmp_path / "ket"
    ket.mkdir()
    (ket / "document.txt").write_text("para zero\n", encoding="utf-8")
    (ket / "qa-pairs.json").write_text("[{" + " " * 5000, encoding="utf-8")  # past the file limit below, too
    result = read_corpus([hippo, ket], max_file_bytes=4000)
    assert sorted(d.text for d in result.documents) == ["para zero", "titled text"]
    assert [Path(p.path).name for p in result.problems] == ["toy.json"]  # listed: no benchmark data it knows


def test_a_records_modified_time_is_checked_as_its_timestamp_and_nan_is_refused() -> None:
    """A record's own "modified" stands in for its timestamp (listing, filters, freshness) unchecked:
    "9999-not-a-date" sorted after every real date. NaN was taken here though an insert refuses it."""
    records = [
        {"id": "r1", "text": "one", "modified": "9999-not-a-date"},
        {"id": "r3", "text": "three", "modified": "2024-01-02"},
    ]
    data = "\n".join(json.dumps(r) for r in records).encode() + b'\n{"id": "r2", "text": "two", "score": NaN}\n'
    data += b'{"id": "r4", "text": "four", "score": 1e999}\n'  # past a float's range: infinity
    result = read_upload("records.jsonl", data)
    assert [d.id for d in result.documents] == ["r3"]
    assert [(p.line, p.reason) for p in result.problems] == [
        (1, "'modified' '9999-not-a-date' is not an ISO-8601 date/time"),
        (3, "unreadable JSON (NaN: numbers must be finite)"),
        (4, "unreadable JSON (1e999: numbers must be finite)"),
    ]
