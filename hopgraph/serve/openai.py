"""The OpenAI-compatible front door: ``GET /v1/models`` and ``POST /v1/chat/completions``, so tools
that speak OpenAI's API (Open WebUI, LangChain, LlamaIndex, the ``openai`` SDKs) ask the index.

Each retrieval method is a model (``hopgraph-ppr``, ``hopgraph-text`` …). The last user message is
the question; earlier messages are not read (each question is retrieved and answered on its own).
Retrieval and answers go through :class:`~hopgraph.serve.service.Service` like ``/v1/answer``: the
same tokens, access rules, request bounds and answer slots. The answer text ends with its sources
(``[n] Title``, numbered as the model cites them) and the structured evidence rides in the extra
field ``hopgraph`` of the response (of the last chunk when streamed).

Streaming relays the LLM's tokens as it writes them (not the answer cut up once generated): on a
CPU model an answer takes seconds to tens of seconds, and a chat window should show it grow. A
stream holds its answer slot until it ends; a reader that hangs up ends it at once, and its
connection to the LLM is closed, which stops the generation there (llama.cpp and vLLM stop a
request whose connection closes).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, field_validator, model_validator
from starlette.types import Receive, Scope, Send

from hopgraph.documents import one_line
from hopgraph.errors import listed
from hopgraph.llm.types import Usage
from hopgraph.retrieve.answer import Answer
from hopgraph.retrieve.packing import RetrievalResult, source_names
from hopgraph.serve.auth import Principal
from hopgraph.serve.errors import APIError, finite_json, problems_of, shown
from hopgraph.serve.schemas import RetrieveRequest, Strict, bounded_question
from hopgraph.serve.service import (
    Generation,
    Service,
    answer_payload,
    finite,
    principal,
    service_of,
    while_connected,
)

router = APIRouter(tags=["openai"])

PREFIX = "hopgraph-"
# Chat clients resend the whole conversation with every question; these bound what is accepted of it
# (the question itself is bounded by serve.max_query_chars, the body by serve.max_question_body_bytes).
MAX_MESSAGES = 256
MAX_CONVERSATION_CHARS = 400_000
MAX_TOKENS = 2**31 - 1  # checked, not applied: a larger max_tokens is no request a model could meet


# ---------------------------------------------------------------------- request
class Part(BaseModel):
    """A content part; only text parts can be asked (images, audio and files are refused in the question)."""

    model_config = ConfigDict(extra="ignore")
    type: str
    text: str | None = None


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")  # name, tool_calls … that SDKs send are harmless here
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[Part] | None = None

    def chars(self) -> int:
        if isinstance(self.content, list):
            return sum(len(p.text or "") for p in self.content)
        return len(self.content or "")


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class Retrieval(Strict):
    """Retrieval settings of this request (the ``hopgraph`` field; with the openai SDK: ``extra_body``)."""

    budget: int | None = Field(None, ge=50, description="λ: context budget in tokens (at most serve.max_budget).")
    params: dict[str, Any] = Field(default_factory=dict, description="Retrieval settings, as in /v1/retrieve.")
    where: dict[str, Any] = Field(default_factory=dict, description="Metadata filter, as in /v1/retrieve.")

    _finite = field_validator("params", "where")(finite_json)


class ChatCompletionRequest(BaseModel):
    """OpenAI's request shape. Unknown fields are ignored (SDKs and chat UIs add their own); the known ones
    are checked. The answer's length and decoding are the server's (answer.max_tokens, greedy), so that
    its citations are reproducible: max_tokens, temperature and top_p are accepted and checked only."""

    model_config = ConfigDict(extra="ignore")
    _bounded_body = model_validator(mode="before")(bounded_question)  # ignored fields are parsed JSON too
    model: str = Field(min_length=1, max_length=200, description="hopgraph-<method>; GET /v1/models lists them.")
    messages: list[Message] = Field(min_length=1, max_length=MAX_MESSAGES)
    stream: StrictBool = False  # "yes" or 1 is a client's mistake, not a request to stream
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    max_completion_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    n: int = Field(1, ge=1, le=1, description="One answer per request.")
    tools: list[Any] | None = Field(None, max_length=0, description="Tool calls are not offered.")
    functions: list[Any] | None = Field(None, max_length=0, description="Function calls are not offered.")
    tool_choice: Literal["none", "auto"] | None = Field(
        None, description="Only 'none' or 'auto': a client that requires a tool call would get text instead."
    )
    response_format: dict[str, Any] | None = None
    hopgraph: Retrieval = Field(default_factory=Retrieval)

    @field_validator("response_format")
    @classmethod
    def _text_only(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and value.get("type", "text") != "text":
            raise ValueError("answers are text with citations; only response_format type 'text' is offered")
        return value

    @model_validator(mode="after")
    def _bounded(self) -> ChatCompletionRequest:
        total = sum(m.chars() for m in self.messages)
        if total > MAX_CONVERSATION_CHARS:
            raise ValueError(
                f"the messages hold {total} characters; the limit is {MAX_CONVERSATION_CHARS} (start a new "
                "conversation)"
            )
        return self


def question_of(body: ChatCompletionRequest) -> str:
    """The text of the last user message (422 when there is none or it is not text)."""
    message = next((m for m in reversed(body.messages) if m.role == "user"), None)
    if message is None:
        raise APIError(422, "invalid_request", "messages: no user message to answer")
    if isinstance(message.content, list):
        other = sorted({p.type for p in message.content if p.type != "text"})
        if other:
            kinds = listed([shown(kind) for kind in other])  # echoed cut, at most 20: a type may be a megabyte long
            raise APIError(422, "unsupported_content", f"the question may hold text parts only, not {kinds}")
        return "\n".join(p.text or "" for p in message.content)
    return message.content or ""


def method_of(model: str, service: Service) -> str:
    """The retrieval method a model name stands for; 404 (as OpenAI answers) for a model not served here."""
    methods = service.holder.current.methods
    method = model.removeprefix(PREFIX)
    if not model.startswith(PREFIX) or method not in methods:
        raise APIError(
            404,
            "model_not_found",
            f"model {shown(model)} is not served here; this index offers {', '.join(PREFIX + m for m in methods)}",
        )
    return method


def retrieve_request(body: ChatCompletionRequest, method: str) -> RetrieveRequest:
    try:
        return RetrieveRequest(query=question_of(body), method=method, **body.hopgraph.model_dump())
    except ValidationError as exc:
        _, problems = problems_of(exc.errors())
        raise APIError(422, "invalid_request", f"the question: {problems}") from None


# ---------------------------------------------------------------------- response pieces
# What makes a link, an image or markup in the Markdown chat clients render: a title is a document
# author's words, and "![x](http://host/pixel.png)" in one would load that address in every reader's
# browser (Open WebUI renders answers as Markdown).
_MARKDOWN = re.compile(r"[\\\[\]<>`]")


def sources(reply: Answer) -> str:
    """The cited evidence as lines ``[n] Title (p. 3)`` (the document id where a title is missing, the
    page or section where the document's format keeps them)."""
    lines = []
    for c in reply.citations:
        names = source_names(c["doc_ids"], c["titles"], c.get("places"))
        # one_line too: an index built before titles were stored on one line may hold line breaks
        shown = _MARKDOWN.sub(r"\\\g<0>", one_line("; ".join(dict.fromkeys(names))))
        lines.append(f"[{c['evidence']}] {shown or 'untitled'}")
    return "\n\nSources:\n" + "\n".join(lines) if lines else ""


# What turns the model's words into an image, a link or markup in those clients: the model copies
# document text, and one document's "![x](http://host/?d=...)" (or an instruction to write one) would
# load an address in the reader's browser, perhaps with words of other evidence in it. Escaped, not
# removed; [n] citation marks stay as they are (a "[1]: http://..." definition line is escaped too).
# The model's own backslashes are escaped as well: its "\<img ...>" would become "\\<img ...>", a
# literal backslash before a live tag.
_MODEL_MARKUP = re.compile(r"!\[|\]\(|\]:|<|\\")


def defused(text: str) -> str:
    """``text`` with every image, inline link, link definition, HTML tag start and backslash escaped."""
    return _MODEL_MARKUP.sub(lambda m: m.group(0)[:-1] + "\\" + m.group(0)[-1], text)


class Defused:
    """:func:`defused` over streamed pieces: a piece ending in "!" or "]" is held back until the next
    shows what follows it (the two halves of "![" may come in two pieces)."""

    def __init__(self) -> None:
        self.held = ""

    def feed(self, text: str) -> str:
        text = self.held + text
        cut = len(text) - 1 if text.endswith(("!", "]")) else len(text)
        self.held = text[cut:]
        return defused(text[:cut])

    def flush(self) -> str:
        out, self.held = self.held, ""
        return out


def content_of(reply: Answer) -> str:
    """What the chat shows: the model's words with their [n] marks (or "not found"), then the sources."""
    return defused(reply.raw.strip() or reply.text) + sources(reply)


class Head:
    """What every chunk of one completion repeats."""

    def __init__(self, model: str):
        self.id, self.created, self.model = f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), model

    def body(self, kind: str, **fields: Any) -> dict[str, Any]:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model, **fields}

    def chunk(self, delta: dict[str, Any], finish: str | None = None, **fields: Any) -> str:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return event(self.body("chat.completion.chunk", choices=[choice], **fields))


_LINE_SEPARATORS = {0x2028: "\\u2028", 0x2029: "\\u2029"}  # only ever inside a JSON string: escaped there


def event(data: Any) -> str:
    """One server-sent event. U+2028 and U+2029 are escaped: clients that read the stream by lines
    with ``str.splitlines`` (httpx's line reader, requests' ``iter_lines``) cut an event there."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return "data: " + text.translate(_LINE_SEPARATORS) + "\n\n"


class Trimmed:
    """Streamed text without the leading and trailing whitespace that the whole answer is stripped of:
    trailing whitespace is held back until more text follows it."""

    def __init__(self) -> None:
        self.started, self.held = False, ""

    def feed(self, text: str) -> str:
        if not self.started:
            text = text.lstrip()
            self.started = bool(text)
        body = text.rstrip()
        if not body:
            self.held += text
            return ""
        out, self.held = self.held + body, text[len(body) :]
        return out


async def error_event(request: Request, exc: Exception) -> str:
    """A failure after the stream began, as the error body its status response would have carried
    (the app's own handlers choose the code and message, so nothing internal leaks here either)."""
    handlers = request.app.exception_handlers
    handler = next(handlers[c] for c in type(exc).__mro__ if c in handlers)  # Exception is always there
    response = await handler(request, exc)
    body = bytes(response.body).decode("utf-8")
    # The response said 200 before this: the request's log line and metrics take the status and code
    # of the error, so a failed stream is not counted as a success.
    request.state.stream_error = {"status": response.status_code, "code": json.loads(body)["error"]["code"]}
    return f"data: {body}\n\n"


# ---------------------------------------------------------------------- streaming
async def answer_events(
    request: Request,
    service: Service,
    body: ChatCompletionRequest,
    result: RetrievalResult,
    version: str,
    evidence: list[dict[str, Any]],
) -> AsyncGenerator[str, None]:
    """The server-sent events of one streamed answer. The answer slot is taken, and the LLM has
    accepted the request, before the first event: all slots busy, an LLM that is down or too slow to
    start (503 with Retry-After, which OpenAI's SDKs retry) or one that refuses the prompt (422) is a
    status response, not a stream that fails. The slot is given back as soon as the model is done
    (or serve.answer_timeout has passed), before the sources and the evidence, which can be large:
    a reader that stops reading once the model is done holds a connection, not a slot."""
    head, generation, wrote = Head(body.model), Generation(service, result), False
    async with service.answer_slot(request.state.user), aclosing(service.in_time(generation.texts())) as texts:
        first = await anext(texts, None)  # raises before any event: the error handlers answer
        yield head.chunk({"role": "assistant", "content": ""})
        try:
            trimmed, safe = Trimmed(), Defused()
            piece = first
            while piece is not None:
                text = safe.feed(trimmed.feed(piece))
                if text:
                    wrote = True
                    yield head.chunk({"content": text})
                piece = await anext(texts, None)  # closed at once when the reader hangs up
        except Exception as exc:  # headers are sent: the error ends the stream as an event
            yield await error_event(request, exc)
            return
    reply = generation.reply
    assert reply is not None  # set when texts() ends
    rest = safe.flush()  # a last "!" or "]"
    if rest or not wrote:  # not written: "not found", or a model that wrote only whitespace (its own text)
        yield head.chunk({"content": rest or defused(reply.text)})
    if reply.citations:
        yield head.chunk({"content": sources(reply)})
    yield head.chunk({}, "stop", hopgraph=answer_payload(reply, result, version, evidence))
    if body.stream_options and body.stream_options.include_usage:
        yield event(head.body("chat.completion.chunk", choices=[], usage=usage_of(generation.usage)))
    yield "data: [DONE]\n\n"


def usage_of(usage: Usage) -> dict[str, int]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    }


class SlotStream(StreamingResponse):
    """The events of one streamed answer, closed as soon as the response ends, however it ends.

    A reader that hangs up leaves the event generator suspended at a ``yield``: unless closed here
    it keeps its answer slot (and its LLM connection) until the garbage collector finalizes it."""

    def __init__(self, first: str, events: AsyncGenerator[str, None]):
        self.events = events
        super().__init__(
            self.resumed(first),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def resumed(self, first: str) -> AsyncIterator[str]:
        yield first
        async for item in self.events:
            yield item

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.events.aclose()  # gives the answer slot back and closes the LLM stream


# ---------------------------------------------------------------------- endpoints
def model_card(method: str) -> dict[str, Any]:
    return {"id": PREFIX + method, "object": "model", "created": 0, "owned_by": "hopgraph"}


@router.get("/v1/models")
def models(who: Principal = Depends(principal), service: Service = Depends(service_of)) -> dict[str, Any]:
    """One model per retrieval method this index offers (OpenAI's list shape)."""
    return {"object": "list", "data": [model_card(m) for m in service.holder.current.methods]}


@router.get("/v1/models/{model}")
def model(model: str, who: Principal = Depends(principal), service: Service = Depends(service_of)) -> dict[str, Any]:
    """One model; 404 for a name not served here."""
    return model_card(method_of(model, service))


@router.post("/v1/chat/completions", response_model=None)
async def chat_completions(
    request: Request,
    body: ChatCompletionRequest,
    who: Principal = Depends(principal),
    service: Service = Depends(service_of),
) -> dict[str, Any] | StreamingResponse:
    """The answer to the last user message with numbered sources, and the evidence in ``hopgraph``.

    ``stream: true`` sends server-sent events in OpenAI's chunk format, ending ``data: [DONE]``;
    failures before the first event (sent once the LLM has accepted the request) are JSON errors
    with their status, later ones end the stream
    with an event ``{"error": {"code", "message"}}``. Settings of the retrieval go in the field
    ``hopgraph`` ({budget, params, where}).
    """
    query = retrieve_request(body, method_of(body.model, service))
    version, result = await service.retrieve_async(request, query, who)
    evidence = finite(result.to_dict())["evidence"]
    if body.stream:
        events = answer_events(request, service, body, result, version, evidence)
        # Takes the answer slot and waits for the LLM to accept the request (busy or down is still a
        # 503 with Retry-After), or gives up both when the client hangs up meanwhile.
        first = await while_connected(request, anext(events))
        return SlotStream(first, events)
    reply, usage = await service.generate(request, result)
    message = {"role": "assistant", "content": content_of(reply)}
    return Head(body.model).body(
        "chat.completion",
        choices=[{"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}],
        usage=usage_of(usage),  # as OpenAI's always carry it (clients that count tokens read it)
        hopgraph=answer_payload(reply, result, version, evidence),
    )
