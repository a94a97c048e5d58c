"""Ids of documents to add that share a file name with documents already indexed."""

from __future__ import annotations

import random
import time
from pathlib import PurePosixPath

from hopgraph.index.catalog import pair_namesakes


def brute_force(existing: list[str], ids: list[str]) -> list[tuple[str, str]]:
    """Every new id against every existing id: the reference the table lookup must agree with."""
    return [
        (new, old)
        for new in ids
        if new not in set(existing)
        for old in existing
        if PurePosixPath(old).name == PurePosixPath(new).name
    ]


def test_namesakes_agree_with_comparing_every_pair():
    rng = random.Random(7)
    names = [f"note-{n}.md" for n in range(12)]
    existing = [f"{rng.choice(['a', 'b/c', 'd'])}/{rng.choice(names)}" for _ in range(40)]
    ids = [f"{rng.choice(['', 'x/', 'a/'])}{rng.choice(names)}" for _ in range(60)] + existing[:5]
    found = pair_namesakes(existing, ids)
    assert found == brute_force(existing, ids)
    assert found and all(new not in existing for new, _ in found)


def test_namesakes_of_many_documents_against_a_large_index_are_fast():
    existing = [f"people/p{n}.md" for n in range(50_000)]
    ids = [f"p{n}.md" for n in range(0, 100_000, 2)] + existing[:1000]  # half have a namesake; 1000 are known
    started = time.perf_counter()
    found = pair_namesakes(existing, ids)
    elapsed = time.perf_counter() - started
    assert found == [(f"p{n}.md", f"people/p{n}.md") for n in range(0, 50_000, 2)]
    assert elapsed < 5.0, f"{elapsed:.1f} s for 50,000 ids against 50,000 documents"  # pairwise: 2.5e9 comparisons
