"""Non-interference of forbidden documents: does a reader who may not read them retrieve anything
different because they exist?

For each mode (default, and ``access.isolation``) the corpus (the bundled sample, three restricted
documents with a codeword each, and the first MuSiQue paragraphs with a seeded random ``acl``) is
indexed; so are its unrestricted documents alone. A groupless reader asks the same questions of
both (MuSiQue questions, sample questions, and questions naming the codewords); a question counts
as a difference for a method when the evidence differs (kind, text, documents, path, score to 6
places). ``differences_numbered`` also compares piece and chunk numbers. Documents are chunked one
by one (``chunking.pack_documents`` off; ``--pack-documents`` turns it on): packed, a restricted
document between two public ones changes where their chunks are cut, and every method differs. The LLM-free methods and
CUE at α=0 (sentence units, spaCy entities, no LLM) always run; ``--kg`` adds the KG methods on a
KG extracted by the CPU stand-in (SmolLM2-135M over llama.cpp) for every chunk.

    python3 scripts/bench_noninterference.py
    python3 scripts/bench_noninterference.py --kg --musique-paragraphs 8
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the restricted documents live with the server tests

from hopgraph.config import load_config  # noqa: E402
from hopgraph.evaluate.report import provenance, write_json  # noqa: E402
from hopgraph.index.datasets import load_benchmark  # noqa: E402
from hopgraph.index.pipeline import build_index  # noqa: E402
from hopgraph.llm.standin import StandinServer  # noqa: E402
from hopgraph.retrieve.filters import MetadataFilter  # noqa: E402
from hopgraph.retrieve.methods import LLM_FREE  # noqa: E402
from hopgraph.retrieve.packing import RetrievalResult  # noqa: E402
from hopgraph.retrieve.retriever import Retriever  # noqa: E402
from scripts.bench_acl import corpus  # noqa: E402
from tests.conftest import SAMPLE_SETTINGS  # noqa: E402
from tests.serve.support import CODEWORDS  # noqa: E402

SAMPLE_QUESTIONS = [
    "Who was the first director of the Halvern Harbor Institute?",
    "What does the Orrin Basin Water Board monitor?",
    "Where is the Sorvik campus?",
    "Which vessel will be out of service for hull repairs?",
]
KG_METHODS = ("kg", "hybrid", "ket", "g2cons")


def questions(dataset: Path, count: int) -> list[str]:
    asked = [q.text for q in load_benchmark(dataset, limit=count).questions]
    by_codeword = [f"What is {w}?" for w in CODEWORDS.values()] + [
        f"Who led the rescue during the {CODEWORDS['secret-ops']} survey?"
    ]
    return asked + SAMPLE_QUESTIONS + by_codeword


def signature(result: RetrievalResult, numbered: bool) -> list[tuple]:
    return [
        ((e.index, e.chunk) if numbered else ()) + (e.kind, e.text, tuple(e.doc_ids), e.path, round(e.score, 6))
        for e in result.evidence
    ]


def compare(full: Retriever, public: Retriever, methods: list[str], asked: list[str], budget: int) -> dict[str, Any]:
    """Per method: questions whose groupless results differ between the two indexes."""
    guest = MetadataFilter(groups=frozenset())
    vectors = public.embed(asked)
    out: dict[str, Any] = {"differences": {}, "differences_numbered": {}, "differing_questions": {}}
    for method in methods:
        differing, numbered = [], 0
        for question, vector in zip(asked, vectors):
            a = full.retrieve(question, method=method, budget=budget, metadata_filter=guest, vector=vector)
            b = public.retrieve(question, method=method, budget=budget, metadata_filter=guest, vector=vector)
            if signature(a, False) != signature(b, False):
                differing.append(question)
            numbered += signature(a, True) != signature(b, True)
        out["differences"][method] = len(differing)
        out["differences_numbered"][method] = numbered
        out["differing_questions"][method] = differing
    return out


@contextlib.contextmanager
def llm_settings(enabled: bool, cache: Path) -> Iterator[dict[str, Any]]:
    if not enabled:
        yield {}
        return
    cache.parent.mkdir(parents=True, exist_ok=True)
    with StandinServer("smollm2-135m", context=4096, parallel=2) as llm:
        yield {
            "extraction.kg": "all",
            "llm.base_url": llm.base_url,
            "llm.model": "smollm2-135m",
            "llm.cache": str(cache),
            "llm.max_tokens": 160,
            "llm.context_tokens": 4096,
            "llm.timeout": 1800,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--dataset",
        type=Path,
        default=REPO.parent / "shared" / "data" / "musique" / "kag_dev100" / "musique_qa_100.json",
    )
    parser.add_argument(
        "--musique-paragraphs", type=int, default=40, help="the first N MuSiQue paragraphs join the corpus"
    )
    parser.add_argument(
        "--questions", type=int, default=10, help="MuSiQue questions asked (plus 4 sample and 4 codeword questions)"
    )
    parser.add_argument("--budget", type=int, default=400)
    parser.add_argument(
        "--pack-documents",
        action="store_true",
        help="cut consecutive same-ACL documents as one stream (the default of chunking.pack_documents); off here, "
        "so that a "
        "public document's chunks do not depend on whether a restricted document sits between it and the next",
    )
    parser.add_argument(
        "--kg", action="store_true", help="also extract a KG with the CPU stand-in and compare kg, hybrid, ket, g2cons"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--llm-cache", type=Path, default=REPO / ".hopgraph" / "llm-noninterference.sqlite")
    parser.add_argument("--out", type=Path, default=REPO / "scripts" / "results" / "acl_noninterference.json")
    args = parser.parse_args()
    documents = corpus(args.dataset, args.musique_paragraphs, args.seed, public_share=0.5)
    public_docs = [d for d in documents if d.acl is None]
    asked = questions(args.dataset, args.questions)
    methods = [*LLM_FREE, "cue", *(KG_METHODS if args.kg else ())]
    work = Path(tempfile.mkdtemp(prefix="hopgraph-noninterference-"))
    modes: dict[str, Any] = {}
    try:
        with llm_settings(args.kg, args.llm_cache) as llm:
            settings = {
                **SAMPLE_SETTINGS,
                "chunking.size": 300,
                "chunking.pack_documents": args.pack_documents,
                "extraction.cue_alpha": 0.0,
                "embedding.cache": str(work / "vectors.sqlite"),
                **llm,
            }
            started = time.perf_counter()
            public_manifest = build_index(public_docs, work / "public", load_config(None, settings), progress=False)
            public = Retriever(work / "public")
            for mode, isolation in (("default", False), ("isolation", True)):
                built = time.perf_counter()
                manifest = build_index(
                    documents,
                    work / mode,
                    load_config(None, {**settings, "access.isolation": isolation}),
                    progress=False,
                )
                modes[mode] = {
                    "build_seconds": round(time.perf_counter() - built, 1),
                    "partitions": len(manifest.get("partitions", [])) or 1,
                    **compare(Retriever(work / mode), public, methods, asked, args.budget),
                }
                print(mode, modes[mode]["differences"], flush=True)
            seconds = time.perf_counter() - started
    finally:
        shutil.rmtree(work, ignore_errors=True)
    payload: dict[str, Any] = {
        "benchmark": "non-interference: groupless reader, full index vs index of the unrestricted documents only",
        "corpus": {
            "documents": len(documents),
            "restricted": len(documents) - len(public_docs),
            "musique_paragraphs": args.musique_paragraphs,
            "distinct_acls": len({tuple(d.acl) if d.acl is not None else None for d in documents}),
            "public_counts": public_manifest["counts"],
        },
        "pack_documents": args.pack_documents,
        "questions": len(asked),
        "question_texts": asked,
        "methods": methods,
        "budget": args.budget,
        "llm": "smollm2-135m via llama.cpp (CPU stand-in), KG of every chunk"
        if args.kg
        else "none: kg/hybrid/ket/g2cons not run (pass --kg; CPU stand-in extraction of every chunk of three indexes)",
        "cue": "alpha 0: punkt sentence units, spaCy entities, bi-encoder rerank (no LLM)",
        "modes": modes,
        "seconds": round(seconds, 1),
        "seed": args.seed,
        **provenance(),
    }
    write_json(args.out, payload)
    for mode, result in modes.items():
        print(f"{mode}: {result['differences']} of {len(asked)} questions (numbered: {result['differences_numbered']})")


if __name__ == "__main__":
    main()
