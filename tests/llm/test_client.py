"""The HTTP client, the completion cache and the accounting, against real servers.

Normal operation uses the real stand-in (``llm_server``). Faults use a closed port (a real
connection refused) or :class:`tests.llm.ScriptedServer`, a real HTTP server in a thread that
answers slowly / with a 5xx / with a 400 on purpose: those faults cannot be provoked on demand
from the stand-in.
"""

from __future__ import annotations

import json
import time

import pytest

from hopgraph.config import LLMConfig
from hopgraph.errors import LLMRequestError, LLMUnavailableError
from hopgraph.llm import ChatRequest, Usage, open_llm
from hopgraph.llm.client import CachedLLM, CompletionCache, HttpLLM
from hopgraph.llm.extract import KG_SCHEMA
from hopgraph.llm.probe import FALLBACK_CONCURRENCY, server_slots
from tests.llm.support import InFlight, ScriptedServer, Trickle, chat_completion
from tests.ports import dead_port


def ask(text: str, max_tokens: int = 24, schema: dict | None = None) -> ChatRequest:
    return ChatRequest(messages=(("user", text),), schema=schema, max_tokens=max_tokens)


QUESTIONS = [ask("Name one colour of the sky."), ask("Say the word harbour.")]


def scripted_config(server: ScriptedServer, tmp_path, **update) -> LLMConfig:
    return LLMConfig(
        base_url=server.base_url,
        model="scripted",
        cache=str(tmp_path / "llm.sqlite"),
        **{"retries": 1, "timeout": 5, **update},
    )


# ------------------------------------------------------------------ the real stand-in
def test_completions_over_http_from_the_standin_are_counted(llm_config):
    done = HttpLLM(llm_config).complete(QUESTIONS)
    assert len(done) == 2
    for completion in done:
        assert completion.text.strip()
        assert completion.prompt_tokens > 0 and 0 < completion.completion_tokens <= 24
        assert completion.seconds > 0 and not completion.cached
    usage = Usage()
    usage.add(done)
    assert usage.calls == 2 and usage.cached_calls == 0 and usage.new_calls == 2
    assert usage.prompt_tokens == usage.paid_prompt_tokens == sum(c.prompt_tokens for c in done)
    assert usage.completion_tokens == usage.paid_completion_tokens == sum(c.completion_tokens for c in done)
    record = usage.to_dict()
    assert record["new_calls"] == 2 and record["seconds"] > 0 and "extra" not in record


def test_a_repeated_batch_is_answered_from_the_cache_which_persists(llm_config):
    llm = open_llm(llm_config)
    assert isinstance(llm, CachedLLM)
    first = llm.complete(QUESTIONS)
    arrived: list[int] = []
    second = llm.complete(QUESTIONS, on_done=lambda i, c: arrived.append(i))
    assert [c.text for c in second] == [c.text for c in first]
    assert all(c.cached for c in second) and sorted(arrived) == [0, 1]
    usage = Usage()
    usage.add(second)
    assert usage.cached_calls == usage.calls == 2 and usage.new_calls == 0
    assert usage.paid_prompt_tokens == usage.paid_completion_tokens == 0 and usage.seconds == 0
    assert usage.prompt_tokens == sum(c.prompt_tokens for c in first)  # cached calls still report their size
    # A new cache object on the same file, in front of a backend that cannot answer at all: every
    # completion comes from the file, so no call is attempted.
    dead = HttpLLM(llm_config.model_copy(update={"base_url": f"http://127.0.0.1:{dead_port()}/v1", "retries": 0}))
    reopened = CachedLLM(dead, CompletionCache(llm_config.cache)).complete(QUESTIONS)
    assert [c.text for c in reopened] == [c.text for c in first]
    # Another parameter is another call.
    assert CompletionCache(llm_config.cache).get(ask("Say the word harbour.", max_tokens=25).key(llm.name)) is None


# ------------------------------------------------------------------ faults
def test_backend_down_names_the_server_and_says_work_is_kept(tmp_path):
    url = f"http://127.0.0.1:{dead_port()}/v1"  # nothing listens there: a real connection refused
    llm = open_llm(LLMConfig(base_url=url, model="m", cache=str(tmp_path / "c.sqlite"), retries=1, timeout=5))
    with pytest.raises(LLMUnavailableError) as failure:
        llm.complete(QUESTIONS)
    message = str(failure.value)
    assert url in message and "after 2 attempts" in message and "cannot connect" in message
    assert "cached" in message and "run the same command again" in message


def test_a_server_that_is_down_is_called_down_with_the_command_that_starts_it(tmp_path):
    port = dead_port()  # nothing listens there: a real connection refused
    config = LLMConfig(base_url=f"http://127.0.0.1:{port}/v1", model="m", cache="", retries=0, timeout=5)
    with pytest.raises(LLMUnavailableError) as failure:
        HttpLLM(config).complete([QUESTIONS[0]])
    message = str(failure.value)
    assert "is down after 1 attempt: cannot connect" in message
    assert f"hopgraph llm-server --port {port}" in message and "slow" not in message


def test_a_slow_server_is_called_slow_at_once_and_never_told_to_start(tmp_path):
    # Scripted: a running server (llama.cpp-like, 2 slots) whose answer comes after the client timeout;
    # the stand-in cannot be slowed on demand.
    with ScriptedServer(lambda body, n: (200, "late", 3.0), props={"total_slots": 2}) as server:
        started = time.perf_counter()
        with pytest.raises(LLMUnavailableError) as failure:
            HttpLLM(scripted_config(server, tmp_path, timeout=0.5, retries=3, concurrency=4)).complete([QUESTIONS[0]])
        took = time.perf_counter() - started
        assert len(server.bodies) == 1  # not retried: the same greedy request would take as long again
    message = str(failure.value)
    assert f"LLM server {server.base_url} is slow: no answer within 0.5 s at concurrency 4 against the " in message
    assert "server's 2 slots, max_tokens 24" in message
    assert "Raise llm.timeout, or lower llm.concurrency or max_tokens" in message
    assert "Start it" not in message and "down" not in message
    assert took < 2.5  # one timeout and two probes; four attempts with back-off took 5.5 s


def test_a_stream_from_a_slow_server_is_called_slow(tmp_path):
    import asyncio

    async def read(llm: HttpLLM) -> list[str]:
        return [piece.text async for piece in llm.stream(QUESTIONS[0])]

    with ScriptedServer(lambda body, n: (200, "late", 3.0)) as server:  # scripted: slower than the timeout
        with pytest.raises(LLMUnavailableError, match=r"is slow: wrote nothing for 0\.5 s at concurrency 4") as failure:
            asyncio.run(read(HttpLLM(scripted_config(server, tmp_path, timeout=0.5))))
    assert "Start it" not in str(failure.value)


def test_a_streamed_piece_holding_a_unicode_line_separator_is_read_whole(tmp_path):
    """Servers write U+2028, U+2029 and U+0085 unescaped in a chunk's JSON; httpx's line reader split
    there, and the answer failed as "streamed something other than chat completion chunks"."""
    import asyncio

    async def read(llm: HttpLLM) -> list[str]:
        return [piece.text async for piece in llm.stream(QUESTIONS[0])]

    piece = "one\u2028two\u2029three\u0085four "
    with ScriptedServer(lambda body, n: (200, Trickle(piece, every=0.01, count=3), 0)) as server:
        pieces = asyncio.run(read(HttpLLM(scripted_config(server, tmp_path))))
    assert "".join(pieces) == piece * 3
    assert pieces[0] == ""  # the first piece says the server accepted the request, before any token


def test_a_server_that_accepts_but_never_answers_is_not_called_slow(tmp_path):
    import socket

    # A real fault: a socket that listens but never accepts; the kernel completes connections into
    # its backlog, so requests are sent and nothing ever answers, not even GET /v1/models.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        config = LLMConfig(base_url=url, model="m", cache="", retries=1, timeout=0.5, concurrency=1)
        with pytest.raises(LLMUnavailableError) as failure:
            HttpLLM(config).complete([QUESTIONS[0]])
    message = str(failure.value)
    assert "after 2 attempts: no answer within 0.5 s, and none to GET /v1/models either" in message
    assert "is slow" not in message


def test_concurrency_0_follows_the_slots_the_server_reports_and_explicit_values_are_kept(tmp_path):
    # Scripted: a server reporting 3 slots at /props (as llama.cpp does), to count requests in flight.
    reply = InFlight(0.3)
    requests = [ask(f"question {i}") for i in range(8)]
    with ScriptedServer(reply, props={"total_slots": 3}) as server:
        auto = HttpLLM(scripted_config(server, tmp_path))
        assert auto.config.concurrency == 0 and auto.concurrency == 3
        auto.complete(requests)
        assert reply.most == 3
        reply.most = 0
        HttpLLM(scripted_config(server, tmp_path, concurrency=1)).complete(requests[:3])
        assert reply.most == 1
    with ScriptedServer(lambda body, n: (200, "ok", 0)) as other:  # scripted: no /props (vLLM, others)
        assert HttpLLM(scripted_config(other, tmp_path)).concurrency == FALLBACK_CONCURRENCY == 4


def test_the_standin_past_the_timeout_is_called_slow_and_not_retried(llm_config):
    # A real slow server: the stand-in writing 300 tokens takes seconds even on idle cores.
    config = llm_config.model_copy(update={"timeout": 2.0, "retries": 3, "cache": ""})
    started = time.perf_counter()
    with pytest.raises(LLMUnavailableError) as failure:
        HttpLLM(config).complete([ask("Write a long story about a harbour, its ships and their crews.", 300)])
    took = time.perf_counter() - started
    message = str(failure.value)
    assert "is slow: no answer within 2 s at concurrency 2, max_tokens 300" in message and "Start it" not in message
    assert took < 8  # one attempt and the probes; four attempts with back-off take over 11 s


def test_the_standin_reports_its_slots_and_the_client_matches_them(llm_server, llm_config):
    # The fixture serves with --parallel 2.
    assert server_slots(llm_config) == (True, 2)
    llm = HttpLLM(llm_config)
    assert llm_config.concurrency == 0 and llm.concurrency == 2
    assert all(c.text.strip() for c in llm.complete(QUESTIONS))


def test_a_503_is_retried_until_an_answer_comes(tmp_path):
    # Scripted: the first request fails with 503 (an overloaded server), the retry succeeds.
    with ScriptedServer(lambda body, n: (503, '{"error": "busy"}', 0) if n == 0 else (200, "fine", 0)) as server:
        done = HttpLLM(scripted_config(server, tmp_path, retries=1)).complete([QUESTIONS[0]])
    assert [c.text for c in done] == ["fine"] and done[0].prompt_tokens == 11 and done[0].completion_tokens == 7
    assert len(server.bodies) == 2 and server.bodies[0] == server.bodies[1]


def test_a_503_that_persists_exhausts_the_retries(tmp_path):
    with ScriptedServer(lambda body, n: (503, '{"error": "busy"}', 0)) as server:  # scripted: always overloaded
        with pytest.raises(LLMUnavailableError, match=r"after 3 attempts: HTTP 503"):
            HttpLLM(scripted_config(server, tmp_path, retries=2)).complete([QUESTIONS[0]])
        assert len(server.bodies) == 3


@pytest.mark.parametrize("status", [401, 403, 404])
def test_a_4xx_that_every_request_would_get_fails_at_once_with_the_servers_reason(tmp_path, status):
    # Scripted: a server that refuses every request alike (wrong key, wrong model name or path).
    reason = '{"error": {"message": "model not found"}}'
    with ScriptedServer(lambda body, n: (status, reason, 0)) as server:
        started = time.perf_counter()
        with pytest.raises(LLMRequestError) as failure:
            HttpLLM(scripted_config(server, tmp_path, retries=3)).complete([QUESTIONS[0]])
        assert time.perf_counter() - started < 1.5  # no retry: three would back off 0.5 + 1 + 2 s
        assert len(server.bodies) == 1
    message = str(failure.value)
    assert not isinstance(failure.value, LLMUnavailableError)  # a request error, not "down": no Retry-After
    assert f"refused the request: HTTP {status}" in message and "model not found" in message
    assert server.base_url in message


@pytest.mark.parametrize("status", [400, 413, 422])
def test_a_refusal_of_one_request_is_that_requests_completion_and_the_others_go_on(tmp_path, status):
    # Scripted: llama.cpp and vLLM answer 400 to a prompt longer than the context; the next request is fine.
    reason = '{"error": {"message": "the request exceeds the available context size"}}'
    with ScriptedServer(lambda body, n: (status, reason, 0) if "long" in str(body) else (200, "ok", 0)) as server:
        llm = CachedLLM(HttpLLM(scripted_config(server, tmp_path, retries=3)), CompletionCache(tmp_path / "c.sqlite"))
        requests = [ChatRequest((("user", "a long one"),)), ChatRequest((("user", "short"),))]
        done = llm.complete(requests)
        assert len(server.bodies) == 2  # no retry of the refused one
        assert done[0].text == "" and f"HTTP {status}" in done[0].refused and "context size" in done[0].refused
        assert done[1].text == "ok" and not done[1].refused
        llm.complete(requests)  # the refusal was not cached: asked again; the answer was
        assert len(server.bodies) == 3


@pytest.mark.parametrize("status", [408, 429])
def test_timeouts_and_rate_limits_from_the_backend_are_retried(tmp_path, status):
    # Scripted: a 408/429 first (the backend is busy, not refusing the request), then an answer.
    with ScriptedServer(lambda body, n: (status, '{"error": "busy"}', 0) if n == 0 else (200, "fine", 0)) as server:
        done = HttpLLM(scripted_config(server, tmp_path, retries=1)).complete([QUESTIONS[0]])
    assert [c.text for c in done] == ["fine"] and len(server.bodies) == 2


@pytest.mark.parametrize(
    "first",
    ['{"error": {"code": 429, "message": "busy"}}', '{"error": {"code": "503"}}', "<html>gateway</html>"],
    ids=["429-in-body", "503-as-text", "garbled"],
)
def test_a_200_saying_the_server_is_busy_or_garbled_is_retried(tmp_path, first):
    """Some gateways answer 200 with the error inside: a 429 there was taken for a request no retry
    could help (the error for wrong settings), and a garbled 200 ended the batch at once."""
    answer = json.dumps(chat_completion("fine"))
    with ScriptedServer(lambda body, n: (200, first if n == 0 else answer, 0), raw=True) as server:
        done = HttpLLM(scripted_config(server, tmp_path, retries=1)).complete([QUESTIONS[0]])
    assert [c.text for c in done] == ["fine"] and len(server.bodies) == 2


@pytest.mark.parametrize("body", ["<html>proxy login</html>", '{"choices": []}', '{"object": "error"}'])
def test_a_200_that_is_no_chat_completion_is_a_clear_error(tmp_path, body):
    # Scripted: something other than an OpenAI server (a proxy page, a broken gateway) answers 200.
    with ScriptedServer(lambda request, n: (200, body, 0), raw=True) as server:
        with pytest.raises(LLMUnavailableError, match="HTTP 200 without an OpenAI chat completion"):
            HttpLLM(scripted_config(server, tmp_path)).complete([QUESTIONS[0]])


def cached_http(server: ScriptedServer, tmp_path, **update) -> tuple[CachedLLM, CompletionCache]:
    """The HTTP client of ``server``, without retries, behind a completion cache of its own."""
    config = scripted_config(server, tmp_path, retries=0, **update)
    cache = CompletionCache(config.cache)
    return CachedLLM(HttpLLM(config), cache), cache


def test_completions_that_arrived_before_a_failure_stay_in_the_cache(tmp_path):
    # Scripted: a server that answers some requests and fails others with 503 (then is fixed).
    healthy = {"now": False}

    def reply(body, n):
        prompt = body["messages"][-1]["content"]
        if "bad" in prompt and not healthy["now"]:
            return 503, '{"error": "down"}', 0.3  # slower, so the good answers before it are seen first
        return 200, f"answer to {prompt}", 0

    requests = [ask("good one"), ask("good two"), ask("bad three"), ask("good four")]
    with ScriptedServer(reply) as server:
        llm, cache = cached_http(server, tmp_path, concurrency=1)
        with pytest.raises(LLMUnavailableError, match="HTTP 503"):
            llm.complete(requests)
        keys = llm.keys(requests)
        assert cache.get(keys[0]).text == "answer to good one" and cache.get(keys[1]).text == "answer to good two"
        assert cache.get(keys[2]) is None
        healthy["now"] = True
        asked_before = len(server.bodies)
        done = llm.complete(requests)  # the resumed run pays only for what is missing
        resumed = server.prompts()[asked_before:]
    assert [c.text for c in done] == [f"answer to {r.messages[0][1]}" for r in requests]
    assert "bad three" in resumed and "good one" not in resumed and "good two" not in resumed
    assert [c.cached for c in done[:2]] == [True, True] and not done[2].cached


def test_completions_still_running_when_another_fails_are_kept_too(tmp_path):
    """A failure ended the call only once the requests already sent had come back (the pool waits
    for them), and their completions were dropped: the re-run paid for them again."""

    def reply(body, n):
        prompt = body["messages"][-1]["content"]
        return (503, '{"error": "down"}', 0) if "bad" in prompt else (200, f"answer to {prompt}", 1.0)

    requests = [ask("slow good"), ask("bad")]
    with ScriptedServer(reply) as server:
        llm, cache = cached_http(server, tmp_path, concurrency=2)
        with pytest.raises(LLMUnavailableError, match="HTTP 503"):
            llm.complete(requests)
    assert cache.get(llm.keys(requests[:1])[0]).text == "answer to slow good"


def test_asking_the_server_what_it_serves_never_holds_the_event_loop(tmp_path):
    """A streamed answer's cache key asked the LLM server what it serves on the event loop: a slow
    server stalled every request of the query server (4 s) meanwhile."""
    import asyncio

    from hopgraph.llm.client import stream_completion

    with ScriptedServer(lambda body, n: (200, "an answer", 0), props={"model_path": "/m/a.gguf"}) as slow:
        slow.get_delay = 1.5
        llm, _ = cached_http(slow, tmp_path)

        async def answer_while_ticking() -> tuple[str, float]:
            ticks: list[float] = []

            async def tick() -> None:
                while True:
                    ticks.append(time.monotonic())
                    await asyncio.sleep(0.05)

            ticker = asyncio.create_task(tick())
            pieces = [piece.text async for piece in stream_completion(llm, ask("Say something."))]
            ticker.cancel()
            return "".join(pieces), max(b - a for a, b in zip(ticks, ticks[1:]))

        text, longest_gap = asyncio.run(answer_while_ticking())
    assert text == "an answer" and longest_gap < 1.0, longest_gap


def test_a_request_repeated_in_one_batch_is_paid_once(tmp_path):
    """Three copies of one request (a chunk ingested twice) were three calls; now one, and the
    copies count as cache hits."""
    with ScriptedServer(lambda body, n: (200, f"answer {n}", 0)) as server:
        llm, _ = cached_http(server, tmp_path)
        arrived: list[int] = []
        done = llm.complete(
            [ask("same"), ask("other"), ask("same"), ask("same")], on_done=lambda i, c: arrived.append(i)
        )
    assert len(server.bodies) == 2 and sorted(arrived) == [0, 1, 2, 3]
    assert done[0].text == done[2].text == done[3].text != done[1].text
    assert [c.cached for c in done] == [False, False, True, True]


def test_a_server_serving_another_model_is_not_answered_from_the_first_ones_completions(tmp_path):
    """llama.cpp answers any llm.model ("default") with the model it loaded: a stand-in restarted
    with another model was answered from the first model's cached completions, silently. Scripted
    servers report their model as llama.cpp does (the stand-in's Qwen model is too large for CI)."""

    def server(name: str) -> ScriptedServer:
        return ScriptedServer(
            lambda body, n: (200, f"{name} says hello", 0),
            props={"total_slots": 1, "model_path": f"/models/{name}.gguf"},
            models=[{"id": "-", "object": "model", "owned_by": "llamacpp"}],
        )

    question = [ask("Say hello.")]
    with server("smollm2") as first:
        assert cached_http(first, tmp_path)[0].complete(question)[0].text == "smollm2 says hello"
    with server("qwen") as second:
        llm, _ = cached_http(second, tmp_path)
        assert llm.complete(question)[0].text == "qwen says hello" and len(second.bodies) == 1
        assert llm.complete(question)[0].cached  # and its own completions are cached
    # A client that runs for months (the query server) asks again: a restart with another model is seen.
    switching = server("smollm2")
    with switching:
        llm, _ = cached_http(switching, tmp_path / "switch")
        llm.inner.served.ask_again = 0.0
        assert llm.complete(question)[0].text == "smollm2 says hello"
        switching.props["model_path"], switching.reply = "/models/qwen.gguf", lambda body, n: (200, "qwen says", 0)
        assert llm.complete(question)[0].text == "qwen says"
    # A server still loading its model (503) cannot tell: what it said before stands, cached completions are found.
    with server("qwen") as loading:
        loading.models = 503
        llm, _ = cached_http(loading, tmp_path)
        assert llm.complete(question)[0].cached and loading.bodies == []
    # With no server to ask, the completions of the model served last are still found.
    down = HttpLLM(scripted_config(second, tmp_path, retries=0))
    assert CachedLLM(down, CompletionCache(down.config.cache)).complete(question)[0].text == "qwen says hello"


def test_structured_requests_carry_the_json_schema(tmp_path, monkeypatch):
    monkeypatch.setenv("HOPGRAPH_TEST_KEY", "s3cret")
    with ScriptedServer(lambda body, n: (200, "{}", 0)) as server:  # scripted: to read the exact request bodies
        on = HttpLLM(scripted_config(server, tmp_path, structured=True, api_key_env="HOPGRAPH_TEST_KEY"))
        off = HttpLLM(scripted_config(server, tmp_path, structured=False, api_key_env=""))
        on.complete([ask("extract", 64, KG_SCHEMA)])
        on.complete([ask("no schema", 64)])
        off.complete([ask("extract", 64, KG_SCHEMA)])
    constrained, plain, unstructured = server.bodies
    assert constrained["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": KG_SCHEMA, "strict": True},
    }
    assert constrained["messages"] == [{"role": "user", "content": "extract"}]
    assert constrained["max_tokens"] == 64 and constrained["temperature"] == 0.0 and constrained["model"] == "scripted"
    assert "response_format" not in plain and "response_format" not in unstructured
    assert server.headers[0].get("authorization") == "Bearer s3cret" and "authorization" not in server.headers[2]


# ------------------------------------------------------------------ answers fitted to the context
def test_answer_evidence_is_fitted_to_the_models_context(sample_documents, tmp_path):
    """A budget far over the model's 2,048-token context: the stand-in answers (no 400) and the
    answer says how much evidence was left out. The stand-in's own prompt count checks the margin
    kept for its tokenizer (SmolLM2's, not cl100k). A server of its own with a small context keeps
    the prompt, which 2 cores read at ~100 tokens/s, short."""
    from hopgraph.config import AnswerConfig
    from hopgraph.llm.standin import StandinServer
    from hopgraph.models import count_tokens
    from hopgraph.retrieve.answer import answer_many
    from hopgraph.retrieve.packing import Evidence, RetrievalResult

    # About 12,000 cl100k tokens of real prose: the sample corpus, paragraph by paragraph, repeated.
    paragraphs = [p.strip() for d in sample_documents for p in d.text.split("\n\n") if len(p.strip()) > 40]
    evidence: list[Evidence] = []
    while sum(e.tokens for e in evidence) < 12_000:
        text = paragraphs[len(evidence) % len(paragraphs)]
        evidence.append(
            Evidence("chunk", len(evidence), 1.0, "text", count_tokens(text), text, len(evidence), ["d"], ["Sample"])
        )
    result = RetrievalResult("Who was the first director of the Halvern Harbor Institute?", "text", 12_000, evidence)
    config = AnswerConfig(max_tokens=32)
    with StandinServer("smollm2-135m", context=2048, parallel=1) as server:
        llm_config = LLMConfig(
            base_url=server.base_url, model="smollm2-135m", context_tokens=2048, retries=0, timeout=300, cache=""
        )
        (reply,), usage = answer_many(open_llm(llm_config), [result], config)
    assert usage.calls == 1 and reply.text
    assert 0 < reply.evidence_dropped < len(evidence)
    kept = len(evidence) - reply.evidence_dropped
    assert all(c["evidence"] <= kept for c in reply.citations)
    # The served model counted the prompt itself: prompt + answer fit the context with room to spare.
    assert usage.prompt_tokens + config.max_tokens <= llm_config.context_tokens
    assert usage.prompt_tokens > 0.5 * llm_config.context_tokens  # and the context is used, not wasted
    print(
        f"evidence kept {kept}/{len(evidence)}, served prompt tokens {usage.prompt_tokens} of "
        f"{llm_config.context_tokens}"
    )


def test_retry_after_from_an_overloaded_server_is_honoured(tmp_path):
    # Scripted: a 429 asking for 1.5 s (more than the 0.5 s back-off), then an answer.
    with ScriptedServer(
        lambda body, n: (429, '{"error": "slow down"}', 0, {"Retry-After": "1.5"}) if n == 0 else (200, "fine", 0)
    ) as server:
        llm = HttpLLM(LLMConfig(base_url=server.base_url, model="scripted", retries=2, timeout=10))
        started = time.perf_counter()
        [done] = llm.complete([ChatRequest((("user", "hi"),))])
        waited = time.perf_counter() - started
    assert done.text == "fine" and len(server.bodies) == 2
    assert 1.4 <= waited < 5, waited
