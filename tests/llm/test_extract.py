"""Tolerant parsing, validation and the bounded-retry extraction loop.

extract() runs against the real stand-in (SmolLM2-135M, weak on purpose: its output exercises
the tolerant path for real). The "model that never writes JSON" and the request-body checks use
:class:`tests.llm.ScriptedServer`, a real HTTP server in a thread, because the stand-in cannot be
made to fail every time on demand.
"""

from __future__ import annotations

import time

import httpx
import pytest

from hopgraph.config import LLMConfig
from hopgraph.llm import open_llm
from hopgraph.llm.extract import (
    KG_SCHEMA,
    SENTENCE,
    TASKS,
    UNITS_SCHEMA,
    extract,
    fit_passage,
    parse_json,
    prompt,
    validate_kg,
    validate_units,
)
from hopgraph.models import count_tokens
from tests.llm.support import ScriptedServer

ENTITY_A = '{"name": "Mara Quell", "type": "person", "description": "Founder."}'
ENTITY_B = '{"name": "Halvern Harbor Institute", "type": "organisation", "description": "Studies tides."}'
RELATION = '{"source": "Mara Quell", "target": "Halvern Harbor Institute", "description": "founded", "strength": 9}'

PASSAGES = [
    "The Halvern Harbor Institute was founded in 1921 by Mara Quell in Brisk City.",
    "Jon Vale wrote the novel Grey Water in 1950 while living in Oslo.",
]


# ------------------------------------------------------------------ parse_json
def test_parse_json_reads_fenced_json():
    assert parse_json('Here you go:\n```json\n{"entities": [], "relations": []}\n```\nDone.') == {
        "entities": [],
        "relations": [],
    }
    assert parse_json('```\n["a", "b"]\n```') == ["a", "b"]


def test_parse_json_ignores_prose_around_the_json():
    text = (
        'Sure! The knowledge units are:\n{"knowledge_units": ["Mara Quell founded the institute."]}\nHope this helps.'
    )
    assert parse_json(text) == {"knowledge_units": ["Mara Quell founded the institute."]}


def test_parse_json_accepts_trailing_commas():
    text = '{"entities": [{"name": "A", "type": "t", "description": "d",},], "relations": [],}'
    assert parse_json(text) == {"entities": [{"name": "A", "type": "t", "description": "d"}], "relations": []}


@pytest.mark.parametrize(
    "text, value",
    [
        ('Sure [1]: {"knowledge_units": ["a", "b"]}', {"knowledge_units": ["a", "b"]}),
        ('<think>maybe {"x": 1}</think>{"knowledge_units": ["a"]}', {"knowledge_units": ["a"]}),
        ('```text\nno JSON here\n```\n```json\n{"knowledge_units": ["a"]}\n```', {"knowledge_units": ["a"]}),
        ('Step [2]: {"knowledge_units": ["kept", "cut o', {"knowledge_units": ["kept"]}),
        ('{"knowledge_units": ["a comma, ]", "b",],}', {"knowledge_units": ["a comma, ]", "b"]}),
        (
            '<think>{"knowledge_units": ["a longer draft", "b", "c"]}</think>{"knowledge_units": ["a"]}',
            {"knowledge_units": ["a"]},
        ),
        ('The 3" pipe: {"k": "a, }"}', {"k": "a, }"}),
        (" ".join(f"f[{i}]" for i in range(300)) + ' {"knowledge_units": ["x"]}', {"knowledge_units": ["x"]}),
    ],
    ids=[
        "bracket-in-prose",
        "think-first",
        "second-fence",
        "prose-then-cut",
        "comma-in-string",
        "larger-draft-in-think",
        "quote-in-prose",
        "many-brackets-before",
    ],
)
def test_parse_json_finds_the_value_past_brackets_and_fences_of_prose(text, value):
    """Only the first bracket and the first fence were tried (each of these was None), and the
    trailing-comma rule also rewrote text inside strings ("a comma, ]" became "a comma]")."""
    assert parse_json(text) == value


def test_prose_full_of_citation_brackets_is_read_at_once():
    """Every bracket that opened no JSON was read again without trailing commas (0.44 s for 15 kB of
    prose with [n] citations, seconds for 44 kB): only a value that stopped at such a comma is."""
    text = "Some prose [1] with citations [2], and more [3]. " * 300 + ' {"units": ["a", "b",],}'
    started = time.perf_counter()
    assert parse_json(text) == {"units": ["a", "b"]}
    assert time.perf_counter() - started < 0.2  # a bound on a regression, not a speed claim: it takes ~1 ms


@pytest.mark.parametrize("text", ["[" * 100_000, '{"a": ' * 50_000, "[1, " * 30_000])
def test_a_completion_of_endless_brackets_is_no_json_not_an_error(text):
    """A model looping on "[" nests past the interpreter's recursion limit."""
    assert parse_json(text) is None


def test_parse_json_salvages_the_complete_items_of_truncated_json():
    # A completion cut off by max_tokens inside the second entity keeps the first.
    cut_entity = f'{{"entities": [{ENTITY_A}, {{"name": "Halvern Har'
    assert parse_json(cut_entity) == {"entities": [{"name": "Mara Quell", "type": "person", "description": "Founder."}]}
    # ... inside the second relation: both entities and the first relation survive.
    cut_relation = f'{{"entities": [{ENTITY_A}, {ENTITY_B}], "relations": [{RELATION}, {{"source": "Mara'
    salvaged = validate_kg(parse_json(cut_relation))
    assert [e["name"] for e in salvaged["entities"]] == ["Mara Quell", "Halvern Harbor Institute"]
    assert [r["strength"] for r in salvaged["relations"]] == [9]
    # ... inside a string item of a list: the finished strings survive, escaped quotes included.
    assert parse_json('{"knowledge_units": ["One fact.", "A \\"quoted\\" fact.", "Three fa') == {
        "knowledge_units": ["One fact.", 'A "quoted" fact.']
    }
    # ... with a closing brace inside a string of the unfinished part.
    assert parse_json('{"knowledge_units": ["Kept.", "Cut } here') == {"knowledge_units": ["Kept."]}


@pytest.mark.parametrize(
    "text", ["", "I could not find any entities in this passage.", "{not json at all}", '{"entities": [{"name": ', "]["]
)
def test_parse_json_returns_none_for_garbage(text):
    assert parse_json(text) is None


# ------------------------------------------------------------------ validation
def test_validate_kg_drops_bad_items_and_fills_defaults():
    data = {
        "entities": [
            {"name": "  Mara   Quell ", "type": "person", "description": "Founder\nof it."},
            {"name": "Brisk City"},  # type and description missing: defaults
            {"name": "   "},
            {"type": "person"},
            "Jon Vale",
            None,
            {"name": 42},  # no usable name: dropped
        ],
        "relations": [
            {"source": "Mara Quell", "target": "Brisk City", "description": "lived in", "strength": 7.0},
            {"source": "Mara Quell", "target": "Brisk City", "strength": 11},  # out of range: default 5
            {"source": "Mara Quell", "target": "Brisk City", "strength": "8"},  # not a number: default 5
            {"source": "Mara Quell"},
            {"target": "Brisk City"},
            {"source": "", "target": "x"},
            ["a", "b"],  # no endpoints: dropped
        ],
    }
    assert validate_kg(data) == {
        "entities": [
            {"name": "Mara Quell", "type": "person", "description": "Founder of it."},
            {"name": "Brisk City", "type": "thing", "description": ""},
        ],
        "relations": [
            {"source": "Mara Quell", "target": "Brisk City", "description": "lived in", "strength": 7},
            {"source": "Mara Quell", "target": "Brisk City", "description": "", "strength": 5},
            {"source": "Mara Quell", "target": "Brisk City", "description": "", "strength": 5},
        ],
    }
    assert validate_kg({"entities": []}) == {"entities": [], "relations": []}  # relations missing: none
    for not_a_kg in (None, [], "text", {"relations": []}, {"entities": "Mara"}):
        assert validate_kg(not_a_kg) is None


def test_validate_units_accepts_the_key_spellings_small_models_use():
    for key in ("knowledge_units", "knowledge units", "units"):
        assert validate_units({key: [" A fact. ", "", "Another\nfact.", 3, None]}) == ["A fact.", "Another fact."]
    assert validate_units(["bare", "list"]) == ["bare", "list"]
    for not_units in (None, {}, {"facts": ["x"]}, {"units": "x"}, {"units": ["", "  "]}, "x"):
        assert validate_units(not_units) is None


def test_schemas_match_their_validators():
    assert TASKS["kg"].schema is KG_SCHEMA and TASKS["kg"].validate is validate_kg
    assert TASKS["units"].schema is UNITS_SCHEMA and TASKS["units"].validate is validate_units
    assert "{passage}" in prompt("kg_extract") and "{passage}" in prompt("knowledge_units")


def test_long_passages_are_cut_to_fit_the_context():
    config = LLMConfig(context_tokens=512, max_tokens=128)
    template = prompt("kg_extract")
    passage = "Mara Quell founded the Halvern Harbor Institute in Brisk City. " * 200
    cut = fit_passage(passage, template, config)
    assert passage.startswith(cut) and len(cut) < len(passage)
    assert count_tokens(template) + count_tokens(cut) + config.max_tokens <= config.context_tokens
    assert fit_passage(PASSAGES[0], template, config) == PASSAGES[0]


def test_a_cut_passage_fits_the_context_in_the_served_models_own_tokens(llm_server):
    """Cut to the cl100k count alone, a prompt of names and numbers was 2,173 SmolLM2 tokens with
    its completion in a 2,048 context (vLLM refuses such a prompt). Counted here by the stand-in's
    own tokenizer, with its chat template around the prompt."""
    config = LLMConfig(context_tokens=2048, max_tokens=512)
    template = prompt("kg_extract")
    passage = " ".join(f"Ysolde Marrin-{n} (b. 17{n % 100:02d}) chaired Vellum Trust {n}." for n in range(400))
    asked = template.replace("{passage}", fit_passage(passage, template, config))
    root = llm_server.base_url.removesuffix("/v1")
    chat = httpx.post(f"{root}/apply-template", json={"messages": [{"role": "user", "content": asked}]}, timeout=60)
    tokens = httpx.post(f"{root}/tokenize", json={"content": chat.json()["prompt"]}, timeout=60).json()["tokens"]
    assert len(tokens) + config.max_tokens <= config.context_tokens


# ------------------------------------------------------------------ extract() against the stand-in
def check_consistent(results, usage, task_name, passages):
    """Every result is a validated value or None, and the accounting agrees with the Nones."""
    validate = TASKS[task_name].validate
    assert len(results) == len(passages)
    for value in results:
        if value is not None:
            assert validate(value) == value  # already validated: validating again changes nothing
    nones = sum(value is None for value in results)
    assert usage.fallbacks == nones
    assert usage.parse_failures >= nones
    # Attempt k+1 re-asks exactly the passages that failed attempt k, so every failure but the
    # final ones costs one more call.
    assert usage.calls == len(passages) + usage.parse_failures - usage.fallbacks
    assert usage.retry_calls == usage.parse_failures - usage.fallbacks
    assert usage.new_calls == usage.calls and usage.cached_calls == 0
    assert usage.prompt_tokens > 0 and usage.completion_tokens > 0


@pytest.mark.parametrize("structured", [True, False], ids=["structured", "prompt-only"])
@pytest.mark.parametrize("task_name", ["kg", "units"])
def test_extract_from_the_standin_gives_valid_values_or_recorded_fallbacks(llm_config, task_name, structured):
    config = llm_config.model_copy(update={"structured": structured, "parse_retries": 1})
    llm = open_llm(config)
    told: list[tuple[int, int]] = []
    results, usage = extract(llm, task_name, PASSAGES, config, tell=lambda done, total: told.append((done, total)))
    assert told == [(k, len(PASSAGES)) for k in range(1, len(PASSAGES) + 1)]  # each first answer, as it arrives
    check_consistent(results, usage, task_name, PASSAGES)
    if structured:  # the grammar enforces the schema's string bounds (a looping description is cut, not fatal)
        bound = SENTENCE["maxLength"]
        texts = (
            [u for r in results if r for u in r]
            if task_name == "units"
            else [item["description"] for r in results if r for item in r["entities"] + r["relations"]]
        )
        assert all(len(t) <= bound for t in texts)
    # The same extraction again costs nothing and gives the same results (greedy first attempt,
    # seeded retries, every completion cached).
    again, usage_again = extract(llm, task_name, PASSAGES, config)
    assert again == results
    assert usage_again.cached_calls == usage_again.calls == usage.calls and usage_again.new_calls == 0


# ------------------------------------------------------------------ faults and request shape
@pytest.mark.parametrize("task_name", ["kg", "units"])
def test_a_model_that_never_writes_json_ends_in_fallbacks_not_errors(tmp_path, task_name):
    # Scripted: a model whose every answer is prose (the stand-in cannot be made to fail on demand).
    with ScriptedServer(lambda body, n: (200, "Sorry, I cannot find anything useful in this passage.", 0)) as server:
        config = LLMConfig(
            base_url=server.base_url,
            model="scripted",
            cache=str(tmp_path / "llm.sqlite"),
            parse_retries=2,
            max_tokens=64,
        )
        passages = PASSAGES + ["A third passage."]
        results, usage = extract(open_llm(config), task_name, passages, config)
    assert results == [None, None, None]
    assert usage.parse_failures == len(passages) * (config.parse_retries + 1) == usage.calls == 9
    assert usage.fallbacks == len(passages)
    assert usage.retry_calls == len(passages) * config.parse_retries
    assert 0 < usage.retry_tokens < usage.prompt_tokens + usage.completion_tokens
    # Attempt k is seeded k; retries sample at temperature 0.7 so they can differ from the greedy answer.
    assert sorted(body["seed"] for body in server.bodies) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert {body["temperature"] for body in server.bodies if body["seed"] == 0} == {0.0}
    assert {body["temperature"] for body in server.bodies if body["seed"] > 0} == {0.7}


def test_a_retry_after_a_parse_failure_can_succeed(tmp_path):
    # Scripted: the greedy answer is prose, the sampled retry is valid JSON.
    def reply(body, n):
        return 200, ('{"knowledge_units": ["Jon Vale wrote Grey Water."]}' if body["seed"] == 1 else "No idea."), 0

    with ScriptedServer(reply) as server:
        config = LLMConfig(
            base_url=server.base_url, model="scripted", cache=str(tmp_path / "llm.sqlite"), parse_retries=1
        )
        results, usage = extract(open_llm(config), "units", PASSAGES[1:], config)
    assert results == [["Jon Vale wrote Grey Water."]]
    assert (usage.calls, usage.parse_failures, usage.fallbacks) == (2, 1, 0)


def test_structured_and_prompt_only_extractions_are_cached_apart(tmp_path):
    # Scripted: to see which requests reach the server and what they carry.
    with ScriptedServer(lambda body, n: (200, '{"knowledge_units": ["A fact."]}', 0)) as server:
        base = LLMConfig(base_url=server.base_url, model="scripted", cache=str(tmp_path / "llm.sqlite"))
        on, off = base.model_copy(update={"structured": True}), base.model_copy(update={"structured": False})
        _, first = extract(open_llm(on), "units", PASSAGES, on)
        _, second = extract(open_llm(off), "units", PASSAGES, off)  # same cache file, other mode: real calls
        _, third = extract(open_llm(off), "units", PASSAGES, off)
    assert (first.new_calls, second.new_calls, third.new_calls) == (2, 2, 0)
    assert len(server.bodies) == 4
    assert all(body["response_format"]["json_schema"]["schema"] == UNITS_SCHEMA for body in server.bodies[:2])
    assert not any("response_format" in body for body in server.bodies[2:])
    assert all(PASSAGES[0] in p or PASSAGES[1] in p for p in server.prompts())
