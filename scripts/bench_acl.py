"""Access control audit through the HTTP API: randomized queries by users with overlapping groups,
over every method, counting pieces, citations, paths and codewords of documents the user may not
read (the audit of ``tests/serve/test_acl.py``, larger, with its count written to a result file).

Corpus: the bundled sample (``examples/sample``), three restricted documents that each carry a
codeword found nowhere else, and the first MuSiQue paragraphs (kag_dev100) with a seeded
random ``acl`` (one or two of board / operations / legal / press, or none). The LLM methods run on a
KG of every chunk and CUE units for half the tokens extracted by the CPU stand-in (SmolLM2-135M over
llama.cpp); completions are cached, so a re-run pays no LLM call.

    python3 scripts/bench_acl.py
    python3 scripts/bench_acl.py --queries 200 --answers 0 --out /tmp/acl.json
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the audit and its users live with the server tests

from hopgraph import (
    Index,  # noqa: E402
    load_config,  # noqa: E402
)
from hopgraph.documents import Document  # noqa: E402
from hopgraph.evaluate.report import machine_line, markdown_table, provenance, write_json  # noqa: E402
from hopgraph.files import atomic_write  # noqa: E402
from hopgraph.index.datasets import load_benchmark  # noqa: E402
from hopgraph.index.ingest import read_corpus  # noqa: E402
from hopgraph.llm.standin import StandinServer  # noqa: E402
from hopgraph.retrieve.methods import METHODS  # noqa: E402
from tests.conftest import SAMPLE, SAMPLE_SETTINGS  # noqa: E402
from tests.serve.support import SECRET_DOCUMENTS, USERS, LiveServer, audit_acl  # noqa: E402

GROUPS = ["board", "operations", "legal", "press"]


def corpus(dataset: Path, paragraphs: int, seed: int, public_share: float = 0.4) -> list[Document]:
    """The sample corpus, the codeword documents and MuSiQue paragraphs, ``public_share`` of them
    without ACL and the rest readable by one or two random groups (seeded)."""
    rng = random.Random(seed)
    musique = []
    for d in load_benchmark(dataset, limit=0).documents[:paragraphs]:
        acl = None if rng.random() < public_share else sorted(rng.sample(GROUPS, rng.randint(1, 2)))
        musique.append(
            Document(
                id=d.id, title=d.title, text=d.text, source="musique", metadata={} if acl is None else {"acl": acl}
            )
        )
    secrets = [
        Document(id=d["id"], title=d["title"], text=d["text"], source="secret", metadata={"acl": d["acl"]})
        for d in SECRET_DOCUMENTS
    ]
    return list(read_corpus([SAMPLE]).documents) + secrets + musique


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--dataset",
        type=Path,
        default=REPO.parent / "shared" / "data" / "musique" / "kag_dev100" / "musique_qa_100.json",
    )
    parser.add_argument(
        "--musique-paragraphs", type=int, default=20, help="the first N MuSiQue paragraphs join the corpus"
    )
    parser.add_argument("--queries", type=int, default=2000, help="random /v1/retrieve queries (methods in turn)")
    parser.add_argument(
        "--answers",
        type=int,
        default=12,
        help="random /v1/answer queries over text, kg and cue (the stand-in answers each)",
    )
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument(
        "--llm-cache",
        type=Path,
        default=REPO / ".hopgraph" / "llm-acl.sqlite",
        help="completion cache (a re-run pays nothing)",
    )
    parser.add_argument("--out", type=Path, default=REPO / "scripts" / "results" / "acl_audit.json")
    args = parser.parse_args()
    documents = corpus(args.dataset, args.musique_paragraphs, args.seed)
    doc_acl = {d.id: d.acl for d in documents}
    vocabulary = sorted({w for d in documents for w in re.findall(r"[A-Za-z]{4,}", d.text)})
    work = Path(tempfile.mkdtemp(prefix="hopgraph-acl-"))
    args.llm_cache.parent.mkdir(parents=True, exist_ok=True)
    try:
        with StandinServer("smollm2-135m", context=4096, parallel=2) as llm:
            config = load_config(
                None,
                {
                    **SAMPLE_SETTINGS,
                    "chunking.size": 300,
                    "extraction.kg": "all",
                    "extraction.cue_alpha": 0.5,
                    "llm.base_url": llm.base_url,
                    "llm.model": "smollm2-135m",
                    "llm.cache": str(args.llm_cache),
                    "llm.max_tokens": 160,
                    "llm.context_tokens": 4096,
                    "llm.timeout": 1800,
                    "answer.max_tokens": 48,
                    "serve.rate_limit": 0.0,
                    "serve.answer_timeout": 600,
                    "embedding.cache": str(work / "vectors.sqlite"),
                },
            )
            built = Index.build(documents, work / "index", config, progress=True).manifest
            with LiveServer(work / "index", config) as server, httpx.Client(base_url=server.url, timeout=600) as client:
                retrieve = audit_acl(client, list(METHODS), doc_acl, vocabulary, queries=args.queries, seed=args.seed)
                answer = audit_acl(
                    client,
                    ["text", "kg", "cue"],
                    doc_acl,
                    vocabulary,
                    queries=args.answers,
                    seed=args.seed,
                    endpoint="/v1/answer",
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    restricted = sum(acl is not None for acl in doc_acl.values())
    payload: dict[str, Any] = {
        "benchmark": "access control audit through the HTTP API",
        "corpus": {
            "documents": len(documents),
            "restricted": restricted,
            "musique_paragraphs": args.musique_paragraphs,
            "counts": built["counts"],
        },
        "users": {name: u["groups"] for name, u in USERS.items()},
        "llm": "smollm2-135m via llama.cpp (CPU stand-in), KG of every chunk + CUE α=0.5",
        "retrieve": {
            k: getattr(retrieve, k)
            for k in ("queries", "by_method", "forbidden_chunks", "leaked_codewords", "errors", "violations")
        },
        "answer": {
            k: getattr(answer, k)
            for k in ("queries", "by_method", "forbidden_chunks", "leaked_codewords", "errors", "violations")
        },
        "seed": args.seed,
        **provenance(),
    }
    write_json(args.out, payload)
    rows = [
        {
            "endpoint": endpoint,
            "queries": r.queries,
            "methods": len(r.by_method),
            "forbidden pieces": r.forbidden_chunks,
            "leaked codewords": r.leaked_codewords,
            "errors": r.errors,
        }
        for endpoint, r in (("/v1/retrieve", retrieve), ("/v1/answer", answer))
    ]
    text = (
        f"# Access control audit\n\n{len(documents)} documents ({restricted} restricted), {len(USERS)} users with "
        "overlapping groups "
        f"{json.dumps(payload['users'])}; methods {', '.join(METHODS)}.\n\n"
        + markdown_table(rows, list(rows[0]))
        + f"\nCommand: `{payload['command']}`; commit {payload['git_commit']}; machine: "
        f"{machine_line(payload['machine'])}.\n"
    )
    atomic_write(args.out.with_suffix(".md"), lambda tmp: tmp.write_text(text, encoding="utf-8"))
    print(text)


if __name__ == "__main__":
    main()
