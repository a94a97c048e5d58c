"""Answer metrics: SQuAD normalisation, Coverage (the papers' and whole-word), EM, F1, Accuracy
and supporting-passage recall.

All scores are fractions in [0, 1]; turning them into percentages is left to the report.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from hopgraph.text import normalize_answer


def _normalized_answers(answers: Iterable[str]) -> list[str]:
    """Normalised answers that are not empty: an empty one would match every text."""
    return [norm for norm in (normalize_answer(a) for a in answers) if norm]


def coverage_hit(context: str, answers: Sequence[str], *, whole_words: bool = False) -> bool:
    """The papers' Coverage: some gold answer occurs in the retrieved context.

    The papers match substrings, so the answer "no" is found inside "not" or "known". With
    ``whole_words`` the answer must occur as whole words of the normalised context (stricter,
    reported beside the papers' figure). The (possibly 12k-token) context is normalised once and
    reused for every alias.
    """
    haystack = normalize_answer(context)
    if whole_words:  # normalised text is words joined by single spaces: pad both sides
        haystack = f" {haystack} "
        return any(f" {answer} " in haystack for answer in _normalized_answers(answers))
    return any(answer in haystack for answer in _normalized_answers(answers))


def exact_match(prediction: str, answers: Sequence[str]) -> float:
    """1.0 when the prediction equals any gold answer after normalisation (an answer that
    normalises to nothing, "The", matches nothing: else an empty prediction would score)."""
    predicted = normalize_answer(prediction)
    return max((float(predicted == answer) for answer in _normalized_answers(answers)), default=0.0)


def _token_f1(prediction: str, answer: str) -> float:
    predicted, gold = normalize_answer(prediction).split(), normalize_answer(answer).split()
    common = sum((Counter(predicted) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def f1_score(prediction: str, answers: Sequence[str]) -> float:
    """SQuAD token F1, best over the gold answer and its aliases."""
    return max((_token_f1(prediction, a) for a in answers), default=0.0)


def accuracy(prediction: str, answers: Sequence[str]) -> float:
    """CUE-RAG's Acc: a gold answer is contained in the (often verbose) prediction."""
    predicted = normalize_answer(prediction)
    return float(any(answer in predicted for answer in _normalized_answers(answers)))


def answer_scores(prediction: str, answers: Sequence[str], *, found: bool = True) -> dict[str, float]:
    """EM, F1 and Accuracy of one generated answer. An answer saying it found nothing scores 0:
    "Not found in the documents" contains the gold answer "no" (8.8 % Accuracy on HotpotQA-500
    for a model that never finds anything)."""
    if not found:
        return {"em": 0.0, "f1": 0.0, "accuracy": 0.0}
    return {
        "em": exact_match(prediction, answers),
        "f1": f1_score(prediction, answers),
        "accuracy": accuracy(prediction, answers),
    }


def supporting_recall(retrieved_doc_ids: Iterable[str], supporting_ids: Sequence[str] | None) -> float | None:
    """Fraction of the supporting passages that were retrieved; None when the data marks none."""
    wanted = set(supporting_ids or ())
    if not wanted:
        return None
    return len(wanted & set(retrieved_doc_ids)) / len(wanted)


RECALL_AT = (2, 5)  # passages ranked, as HippoRAG 2 reports supporting-passage recall


def supporting_recall_at(ranked_doc_ids: Sequence[str], supporting_ids: Sequence[str] | None, k: int) -> float | None:
    """:func:`supporting_recall` of the first ``k`` distinct passages in retrieval order."""
    return supporting_recall(list(dict.fromkeys(ranked_doc_ids))[:k], supporting_ids)


def aggregate(per_question: list[dict[str, Any]]) -> dict[str, float | None]:
    """Mean of every numeric (or boolean) field over the questions, ignoring None.

    A field that is None for every question stays in the result as None, so a metric that the
    data cannot support (e.g. supporting recall without marked passages) is visibly absent.
    """
    values: dict[str, list[float]] = {}
    textual: set[str] = set()  # ids, predictions and the like are not averaged
    for row in per_question:
        for key, value in row.items():
            if value is None:
                values.setdefault(key, [])
            elif isinstance(value, (bool, int, float)):
                values.setdefault(key, []).append(float(value))
            else:
                textual.add(key)
    return {key: (sum(v) / len(v) if v else None) for key, v in values.items() if key not in textual}
