"""Benchmark loaders on tiny files in each format, and on the real data when it is present."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hopgraph.errors import InputError
from hopgraph.evaluate.metrics import supporting_recall
from hopgraph.index.datasets import detect_format, load_benchmark, paragraph_id

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"


def _write_json(path: Path, value: object) -> Path:
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


def _write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _ircot(qid: str, answer: str, contexts: list[tuple[str, str, bool]]) -> dict:
    return {
        "question_id": qid,
        "question_text": f"question {qid}?",
        "answers_objects": [{"number": "", "spans": [answer]}, {"spans": [answer, answer + " alias"]}],
        "contexts": [
            {"id": str(i), "title": t, "paragraph_text": p, "is_supporting": s} for i, (t, p, s) in enumerate(contexts)
        ],
    }


def _musique(qid: str, paragraphs: list[tuple[str, str, bool]], aliases: list[str]) -> dict:
    return {
        "id": qid,
        "question": f"question {qid}?",
        "paragraphs": [
            {"idx": i, "title": t, "paragraph_text": p, "is_supporting": s} for i, (t, p, s) in enumerate(paragraphs)
        ],
        "question_decomposition": [],
        "answer": "gold",
        "answer_aliases": aliases,
        "answerable": True,
    }


def test_ketrag_numbers_documents_by_physical_line(tmp_path: Path) -> None:
    (tmp_path / "document.txt").write_text("first paragraph\n\n  \nfourth paragraph\nlast", encoding="utf-8")
    _write_json(
        tmp_path / "qa-pairs.json",
        [
            {"id": "2hop__1", "question": "Q1?", "answer": "first"},
            {"id": "3hop1__2", "question": "Q2?", "answer": "last"},
        ],
    )
    bench = load_benchmark(tmp_path)
    assert [d.id for d in bench.documents] == ["p00000", "p00003", "p00004"]
    assert bench.documents[1].text == "fourth paragraph"
    assert bench.documents[1].title == "" and bench.documents[1].metadata == {"line": 3}
    assert [(q.id, q.answers, q.supporting_ids) for q in bench.questions] == [
        ("2hop__1", ["first"], None),
        ("3hop1__2", ["last"], None),
    ]
    assert load_benchmark(tmp_path / "qa-pairs.json").questions == bench.questions
    limited = load_benchmark(tmp_path, limit=1)
    assert len(limited.questions) == 1 and len(limited.documents) == 3  # corpus stays whole


def test_hipporag_questions_corpus_and_supporting_facts(tmp_path: Path) -> None:
    corpus = [
        {"title": "Alpha", "text": "Alpha is a town."},
        {"title": "Beta", "text": "Beta river."},
        {"title": "Alpha", "text": "Alpha is a town."},
    ]
    _write_json(tmp_path / "toy_corpus.json", corpus)
    _write_json(
        tmp_path / "toy.json",
        [
            {"_id": "h1", "question": "Where?", "answer": "Alpha", "supporting_facts": [["Beta", 0]]},
            {
                "id": "h2",
                "question": "What?",
                "answer": ["river", "stream"],
                "paragraphs": [{"title": "Alpha", "paragraph_text": "Alpha is a town.", "is_supporting": True}],
            },
            {"question": "Unmarked?", "answers": ["x"]},
        ],
    )
    for path in (tmp_path, tmp_path / "toy.json", tmp_path / "toy_corpus.json"):
        assert detect_format(path) == "hipporag"
        bench = load_benchmark(path)
        assert bench.name == "toy"
        assert [d.id for d in bench.documents] == [
            paragraph_id("Alpha", "Alpha is a town."),
            paragraph_id("Beta", "Beta river."),
        ]
        assert bench.documents[0].text == "Alpha is a town." and bench.documents[0].metadata == {"title": "Alpha"}
        q1, q2, q3 = bench.questions
        assert (q1.id, q1.answers, q1.supporting_ids) == ("h1", ["Alpha"], [bench.documents[1].id])
        assert (q2.id, q2.answers, q2.supporting_ids) == ("h2", ["river", "stream"], [bench.documents[0].id])
        assert (q3.id, q3.answers, q3.supporting_ids) == ("2", ["x"], None)


def test_a_supporting_paragraph_the_corpus_spells_otherwise_or_lacks_still_counts(tmp_path: Path) -> None:
    """A flagged paragraph whose copy differed from the corpus's in white space, or that the corpus
    lacked, was dropped without a word: recall was computed over the question's other passages."""
    _write_json(tmp_path / "toy_corpus.json", [{"title": "Paris", "text": "Paris is the capital of  France. "}])
    flagged = [
        {"title": "Paris", "paragraph_text": "Paris is the capital of France.", "is_supporting": True},
        {"title": "Lyon", "paragraph_text": "Lyon lies on the Rhone.", "is_supporting": True},
    ]
    _write_json(tmp_path / "toy.json", [{"id": "q1", "question": "Capital?", "answer": "Paris", "paragraphs": flagged}])
    bench = load_benchmark(tmp_path)
    [paris] = bench.documents
    assert bench.questions[0].supporting_ids == [paris.id, paragraph_id("Lyon", "Lyon lies on the Rhone.")]
    [said] = bench.skipped
    assert said == "1 supporting paragraph(s) not in toy_corpus.json (counted as not retrieved): question 'q1'"
    assert supporting_recall([paris.id], bench.questions[0].supporting_ids) == 0.5
    # The same for HotpotQA-style facts, by title.
    facts = {"id": "q2", "question": "Capital?", "answer": "Paris", "supporting_facts": [["Paris", 0], ["Lyon", 0]]}
    _write_json(tmp_path / "toy.json", [facts])
    bench = load_benchmark(tmp_path)
    assert (
        supporting_recall([paris.id], bench.questions[0].supporting_ids) == 0.5 and "question 'q2'" in bench.skipped[0]
    )


def test_ircot_dedupes_paragraphs_and_limit_keeps_the_corpus(tmp_path: Path) -> None:
    path = _write_jsonl(
        tmp_path / "dev.jsonl",
        [
            _ircot("a", "Rome", [("T1", "p one", True), ("T2", "p two", False), ("T3", "p three", True)]),
            _ircot("b", "Oslo", [("T2", "p two", True), ("T4", "p four", False)]),
        ],
    )
    bench = load_benchmark(path)
    assert detect_format(path) == "ircot"
    # ordered by paragraph id (content hash), so packing cannot group a question's candidates
    assert sorted(d.title for d in bench.documents) == ["T1", "T2", "T3", "T4"]
    assert [d.id for d in bench.documents] == sorted(d.id for d in bench.documents)
    assert bench.questions[0].answers == ["Rome", "Rome alias"]
    assert bench.questions[0].supporting_ids == [paragraph_id("T1", "p one"), paragraph_id("T3", "p three")]
    assert bench.questions[1].supporting_ids == [paragraph_id("T2", "p two")]
    limited = load_benchmark(path, limit=1)
    assert len(limited.questions) == 1 and limited.documents == bench.documents


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_musique_official_with_aliases(tmp_path: Path, suffix: str) -> None:
    records = [
        _musique("2hop__1", [("A", "a text", True), ("B", "b text", False)], ["g", "gold"]),
        _musique("2hop__2", [("B", "b text", True)], []),
    ]
    path = tmp_path / f"musique{suffix}"
    _write_json(path, records) if suffix == ".json" else _write_jsonl(path, records)
    bench = load_benchmark(path)
    assert detect_format(path) == "musique"
    assert len(bench.documents) == 2
    assert bench.questions[0].answers == ["gold", "g"]  # gold first, duplicates dropped
    assert bench.questions[1].supporting_ids == [paragraph_id("B", "b text")]


def test_clear_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        load_benchmark(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text('[{"id": 1,\n oops}]', encoding="utf-8")
    with pytest.raises(InputError, match=r"broken\.json:2: invalid JSON"):
        load_benchmark(broken)
    other = _write_json(tmp_path / "other.json", [{"foo": 1}])
    with pytest.raises(InputError, match=r"other\.json: not a recognised benchmark"):
        load_benchmark(other)
    bad = _write_jsonl(
        tmp_path / "bad.jsonl",
        [_ircot("a", "x", [("T", "p", True)]), {"question_id": "b", "question_text": "q", "contexts": 5}],
    )
    with pytest.raises(InputError, match=r"bad\.jsonl:2: missing or invalid 'contexts'"):
        load_benchmark(bad)
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"question_text": "caf\xe9", "contexts": []}\n')
    with pytest.raises(InputError, match=r"latin\.jsonl: not valid UTF-8 at byte offset 22"):
        load_benchmark(latin)


needs_data = pytest.mark.skipif(not DATA.is_dir(), reason="shared benchmark data not present")


@needs_data
def test_real_ketrag_musique_500() -> None:
    folder = DATA / "musique" / "ketrag_500"
    lines = (folder / "document.txt").read_text(encoding="utf-8").split("\n")
    bench = load_benchmark(folder)
    assert len(bench.questions) == 500
    assert len(bench.documents) == sum(1 for line in lines if line.strip()) == 6761


@needs_data
def test_real_hotpotqa_ircot() -> None:
    bench = load_benchmark(DATA / "hotpotqa" / "dev_subsampled.jsonl")
    ids = {d.id for d in bench.documents}
    assert len(bench.questions) == 500 and len(bench.documents) == len(ids) == 4858
    for question in bench.questions:
        assert question.supporting_ids is not None and len(question.supporting_ids) == 2
        assert set(question.supporting_ids) <= ids
        assert question.answers


@needs_data
def test_real_kag_musique_dev100() -> None:
    bench = load_benchmark(DATA / "musique" / "kag_dev100" / "musique_qa_100.json")
    ids = {d.id for d in bench.documents}
    assert len(bench.questions) == 100 and len(bench.documents) == 1839
    assert sum(len(q.answers) > 1 for q in bench.questions) > 0  # aliases are included
    assert all(q.supporting_ids and set(q.supporting_ids) <= ids for q in bench.questions)
    assert bench.questions[0].answers[0] == "for Best Performance by a Leading Actress in a Play in Ondine"
