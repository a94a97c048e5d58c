"""Answer metrics against hand-computed SQuAD values."""

from __future__ import annotations

import pytest

from hopgraph.evaluate.metrics import (
    accuracy,
    aggregate,
    answer_scores,
    coverage_hit,
    exact_match,
    f1_score,
    normalize_answer,
    supporting_recall,
    supporting_recall_at,
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("The Eiffel Tower!", "eiffel tower"),
        ("  an   Apple, a   day ", "apple day"),
        ("Theatre of the Absurd", "theatre of absurd"),  # "the" only as a whole word
        ("U.S.A.", "usa"),
        ("Rock-'n'-Roll", "rocknroll"),
        ("", ""),
    ],
)
def test_normalize_answer_follows_squad(raw: str, expected: str) -> None:
    assert normalize_answer(raw) == expected


def test_exact_match_takes_best_alias() -> None:
    assert exact_match("the Eiffel tower.", ["Eiffel Tower"]) == 1.0
    assert exact_match("Paris", ["Lyon", "paris"]) == 1.0
    assert exact_match("Paris, France", ["Paris"]) == 0.0
    assert exact_match("anything", []) == 0.0


def test_a_gold_answer_that_normalises_to_nothing_matches_nothing() -> None:
    assert exact_match("", ["The"]) == 0.0 and exact_match("the", ["a"]) == 0.0
    assert exact_match("the", ["a", "The"]) == 0.0 and exact_match("Paris", ["the", "Paris"]) == 1.0


def test_an_answer_that_found_nothing_scores_nothing() -> None:
    """ "Not found in the documents." holds the gold answer "no": Accuracy counted it correct."""
    assert answer_scores("Not found in the documents.", ["no"], found=False) == {"em": 0.0, "f1": 0.0, "accuracy": 0.0}
    assert answer_scores("No, it was not.", ["no"]) == {"em": 0.0, "f1": pytest.approx(0.4), "accuracy": 1.0}


def test_f1_known_values() -> None:
    # prediction tokens: [john, smith, jr] vs gold [john, smith]: P=2/3, R=1, F1=0.8
    assert f1_score("John Smith Jr.", ["John Smith"]) == pytest.approx(0.8)
    # one common token of two on each side: P=R=0.5
    assert f1_score("new york", ["york city"]) == pytest.approx(0.5)
    assert f1_score("Boston", ["Chicago", "boston"]) == pytest.approx(1.0)
    assert f1_score("the", ["a"]) == 0.0  # both empty after normalisation
    assert f1_score("x", []) == 0.0


def test_coverage_uses_aliases_and_normalisation() -> None:
    context = "In 1889, THE Eiffel-Tower opened; its designer was Gustave Eiffel."
    assert coverage_hit(context, ["Eiffel Tower"]) is False  # hyphen removal joins the words
    assert coverage_hit(context, ["Paris", "Gustave Eiffel"]) is True
    assert coverage_hit(context, ["1889"]) is True
    assert coverage_hit(context, ["the"]) is False  # an answer that normalises to nothing never hits
    assert coverage_hit(context, []) is False


def test_accuracy_is_gold_inside_prediction() -> None:
    assert accuracy("It was built by Gustave Eiffel's company.", ["Gustave Eiffel"]) == 1.0
    assert accuracy("Eiffel", ["Gustave Eiffel"]) == 0.0
    assert accuracy("answer", ["", "a"]) == 0.0


def test_supporting_recall() -> None:
    assert supporting_recall(["a", "b", "x"], ["a", "b", "c", "d"]) == 0.5
    assert supporting_recall([], ["a"]) == 0.0
    assert supporting_recall(["a"], None) is None
    assert supporting_recall(["a"], []) is None


def test_supporting_recall_at_counts_the_first_k_distinct_passages_in_order() -> None:
    ranked = ["x", "a", "x", "y", "b"]  # a passage in two pieces counts once, where it first appears
    assert supporting_recall_at(ranked, ["a", "b"], 2) == 0.5
    assert supporting_recall_at(ranked, ["a", "b"], 4) == 1.0
    assert supporting_recall_at(ranked, None, 2) is None


def test_aggregate_means_fields_and_ignores_none() -> None:
    rows = [
        {"id": "q1", "coverage": True, "f1": 0.5, "recall": None, "marked": None},
        {"id": "q2", "coverage": False, "f1": 1.0, "recall": 0.5, "marked": None},
        {"id": "q3", "coverage": True, "f1": 0.0, "recall": 1.0, "marked": None},
    ]
    result = aggregate(rows)
    assert result["coverage"] == pytest.approx(2 / 3)
    assert result["f1"] == pytest.approx(0.5)
    assert result["recall"] == pytest.approx(0.75)
    assert result["marked"] is None
    assert "id" not in result
    assert aggregate([]) == {}


def test_whole_word_coverage_does_not_find_an_answer_inside_a_longer_word() -> None:
    context = "It is not known who built it."
    # The papers' substring match finds "no" inside "not" and "known"; whole words do not.
    assert coverage_hit(context, ["No"]) is True
    assert coverage_hit(context, ["No"], whole_words=True) is False
    assert coverage_hit("Was it rebuilt? No, never.", ["no"], whole_words=True) is True
    assert coverage_hit("Was it rebuilt? No, never.", ["no"]) is True
    # Normalised as the papers' metric: case, punctuation and articles; aliases; multi-word answers.
    context = "In 1889, THE Eiffel Tower opened; its designer was Gustave Eiffel."
    assert coverage_hit(context, ["the eiffel tower"], whole_words=True) is True
    assert coverage_hit(context, ["Lyon", "gustave eiffel."], whole_words=True) is True
    assert coverage_hit(context, ["188"], whole_words=True) is False and coverage_hit(context, ["188"]) is True
    assert coverage_hit(context, ["tower opened its"], whole_words=True) is True  # at the string's ends too
    assert coverage_hit(context, ["in 1889"], whole_words=True) and coverage_hit(context, ["eiffel"], whole_words=True)
    assert (
        coverage_hit(context, ["the"], whole_words=True) is False
        and coverage_hit(context, [], whole_words=True) is False
    )
