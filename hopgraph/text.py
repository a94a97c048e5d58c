"""Text rules shared across layers: the keyword tokeniser (indexing and querying use the same one)
and answer normalisation (answers and their metrics compare text the same way).

They sit below the index, retrieval and evaluation layers so that none needs to import another.
"""

from __future__ import annotations

import functools
import re
import string
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


_ARTICLES = re.compile(r"\b(a|an|the)\b")
_NO_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD rules (lower-case, drop punctuation and a/an/the, collapse white space), so scores
    are comparable with the published ones."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_NO_PUNCTUATION)).split())


NORMALISATION = "v1"  # bump when normalise_entity changes: cached entity names are stored normalised
_ARTICLE = re.compile(r"^(the|a|an) ")
_POSSESSIVE = re.compile(r"['’]s\b")


def normalise_entity(name: str) -> str:
    """The one rule that says two entity names are the same (KG entities and CUE entity nodes): lower-case,
    possessive 's and punctuation dropped, spaces collapsed, a leading article dropped ("The Halvern
    Harbor Institute" and "Halvern Harbor Institute's" meet as one)."""
    text = " ".join(WORD.findall(_POSSESSIVE.sub("", name.lower())))
    return _ARTICLE.sub("", text)
