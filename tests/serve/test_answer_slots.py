"""Answer slots over real HTTP: bounded, shared fairly between users, and given back as soon as a
reader hangs up, stops reading, or the answer runs past serve.answer_timeout, streamed or not."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import httpx
import pytest

from tests.serve.chat_support import QUESTION, ask, one_slot_and_a_silent_llm
from tests.serve.support import USERS, LiveServer, auth, log_lines, wait_until


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


def test_a_hang_up_while_another_request_takes_its_turn_gives_the_user_slot_back(acl_index, serve_config):
    """A user's count of answers was given back after waiting for the turn lock: a stream cancelled
    (its client gone) while another request held that lock for a moment lost it, and each loss took
    one of the user's slots until a restart (every answer of theirs then a 429). The timing is
    staged on the real service: another reader enters while the stream's task group is cancelled,
    as Starlette cancels a streamed response whose client hung up."""
    import anyio

    from hopgraph.serve.app import create_app
    from tests.serve.support import token_book

    service = create_app(acl_index, serve_config, token_book(), start_jobs=False).state.service

    async def stream() -> None:
        async with service.answer_slot("guest"):
            await asyncio.sleep(3600)  # waiting for the LLM's next token

    async def other() -> None:
        async with service.answer_slot("bo"):
            await asyncio.sleep(0.05)

    async def scenario() -> list[dict]:
        left = []
        for _ in range(5):
            async with anyio.create_task_group() as outer:
                async with anyio.create_task_group() as streams:
                    streams.start_soon(stream)
                    await asyncio.sleep(0.05)
                    outer.start_soon(other)  # enters answer_slot ...
                    await asyncio.sleep(0)  # ... and holds the turn lock for a moment
                    streams.cancel_scope.cancel()  # the stream's client hangs up now
            left.append(dict(service.answering))
        return left

    assert asyncio.run(scenario()) == [{}] * 5
