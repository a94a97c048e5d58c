"""Words that can be keywords: the one tokeniser shared by indexing (postings) and querying.

It sits below both so that reading an index never imports the build side.
"""
from __future__ import annotations

import functools
import re
from importlib import resources

WORD = re.compile(r"[^\W_]+")


@functools.lru_cache(maxsize=1)
def stop_words() -> frozenset[str]:
    text = resources.files("hopgraph").joinpath("stopwords.txt").read_text(encoding="utf-8")
    return frozenset(word for line in text.splitlines() if not line.startswith("#") for word in line.split())


def words(text: str, min_length: int = 2) -> list[str]:
    """Lower-cased word tokens of ``text`` that can be keywords (stop words removed)."""
    stops = stop_words()
    return [w for w in WORD.findall(text.lower()) if len(w) >= min_length and w not in stops]
