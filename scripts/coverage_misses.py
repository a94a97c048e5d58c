"""Why Coverage misses: each missed question of a method, sorted by cause, and the Coverage reachable.

Coverage (KET-RAG's) asks whether a gold answer occurs in the retrieved text. For a yes/no question
that is a question about the word, not the evidence: "no" sits inside "not" and "known", so it is
found almost always; "yes" is found only where some retrieved passage happens to say "yes". This
script counts, per method, the misses whose answer is "yes" or "no", those where a supporting
passage was not retrieved, and those where every supporting passage was but the answer was not in
the pieces taken from them; and the Coverage a method would reach if it found every question but
the yes/no ones it misses; and the Coverage of the supporting passages alone (a perfect retriever,
on sets that mark them). Retrieval uses the default settings, as ``hopgraph eval`` does.

    python scripts/coverage_misses.py ../shared/data/hotpotqa/dev_subsampled.jsonl \\
        --index .hopgraph/hotpotqa-1200 --methods text,ppr --out scripts/results/coverage_misses_hotpotqa_l1200.json
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from hopgraph.config import HopgraphConfig
from hopgraph.evaluate.metrics import coverage_hit
from hopgraph.evaluate.report import provenance, write_json
from hopgraph.index.datasets import Benchmark, load_benchmark
from hopgraph.retrieve.retriever import Retriever
from hopgraph.text import normalize_answer

YES_NO = frozenset({"yes", "no"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset")
    parser.add_argument("--index", required=True)
    parser.add_argument("--methods", default="text,ppr")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    bench = load_benchmark(args.dataset)
    retriever = Retriever(args.index, HopgraphConfig().retrieval)
    vectors = retriever.embed([q.text for q in bench.questions])
    yes_no = [{normalize_answer(a) for a in q.answers} <= YES_NO for q in bench.questions]
    results = []
    for method in args.methods.split(","):
        causes = {"yes_no": 0, "supporting_passage_not_retrieved": 0, "answer_not_in_retrieved_pieces": 0}
        examples: dict[str, list[dict]] = {cause: [] for cause in causes}
        for q, vector, is_yes_no in zip(bench.questions, vectors, yes_no):
            result = retriever.retrieve(q.text, method=method, vector=vector)
            if coverage_hit(result.context, q.answers):
                continue
            retrieved = set(result.doc_ids)
            if is_yes_no:
                cause = "yes_no"
            elif q.supporting_ids and not set(q.supporting_ids) <= retrieved:
                cause = "supporting_passage_not_retrieved"
            else:
                cause = "answer_not_in_retrieved_pieces"
            causes[cause] += 1
            examples[cause].append({"question": q.text, "answers": list(q.answers)})
        n = len(bench.questions)
        missed = sum(causes.values())
        results.append(
            {
                "method": method,
                "coverage": round(100.0 * (n - missed) / n, 2),
                "misses": causes,
                "yes_no_questions": sum(yes_no),
                # Every question found but the yes/no ones this method misses: what better retrieval can reach.
                "coverage_if_every_other_miss_were_found": round(100.0 * (n - causes["yes_no"]) / n, 2),
                "coverage_without_yes_no_questions": round(
                    100.0 * (n - sum(yes_no) - missed + causes["yes_no"]) / (n - sum(yes_no)), 2
                ),
                "examples": {cause: found[:40] for cause, found in examples.items()},
            }
        )
    write_json(
        Path(args.out),
        {
            "dataset": bench.name,
            "index": args.index,
            "n_questions": len(bench.questions),
            "budget": retriever.config.budget,
            "supporting_passages_only": supporting_passages_only(bench, yes_no),
            "results": results,
            **provenance(),
        },
    )


def supporting_passages_only(bench: Benchmark, yes_no: list[bool]) -> dict[str, Any] | None:
    """Coverage of a perfect retriever: the context is exactly each question's supporting passages
    (title and text), nothing else. A method above it gains from passages that happen to say "yes"."""
    marked = [(q, y) for q, y in zip(bench.questions, yes_no) if q.supporting_ids]
    if not marked:
        return None
    text = {d.id: f"{d.title}\n{d.text}" for d in bench.documents}
    hits = [coverage_hit("\n\n".join(text[i] for i in q.supporting_ids if i in text), q.answers) for q, _ in marked]
    plain = [hit for hit, (_, y) in zip(hits, marked) if not y]
    return {
        "questions": len(marked),
        "coverage": round(100.0 * sum(hits) / len(hits), 2),
        "yes_no_missed": sum(1 for hit, (_, y) in zip(hits, marked) if y and not hit),
        "coverage_without_yes_no_questions": round(100.0 * sum(plain) / max(len(plain), 1), 2),
    }


if __name__ == "__main__":
    main()
