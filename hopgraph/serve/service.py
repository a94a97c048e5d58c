"""What every endpoint shares: who is asking, what they may read, retrieval under the request
bounds, and answers generated in their own bounded pool.

One :class:`Service` lives on ``app.state.service``; routers (``routes``, and any later API
surface) reach it through the dependencies :func:`principal` and :func:`admin`, so the bounds and
the access rules are written once whatever the endpoint's shape.

Answers wait for the LLM in their own pool (``serve.answer_concurrency`` slots), so slow answers
never take the threads that retrieval and ``/healthz`` need.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import threading
import time
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable
from concurrent.futures import ThreadPoolExecutor
from contextlib import aclosing
from pathlib import Path
from typing import Any, TypeVar

import anyio
import orjson
from fastapi import Depends, Request
from fastapi.responses import Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from hopgraph.config import HopgraphConfig, dotted_keys
from hopgraph.deadline import check_deadline, deadline_after
from hopgraph.errors import ConfigError, DeadlineExceeded, LLMUnavailableError, cut
from hopgraph.llm import open_llm
from hopgraph.llm.client import context_window, joined, stream_completion
from hopgraph.llm.types import Completion, Usage
from hopgraph.models import limit_compute_threads
from hopgraph.retrieve.answer import (
    Answer,
    answer_request,
    evidence_that_fits,
    not_found,
    read_answer,
    refusal_error,
)
from hopgraph.retrieve.filters import READER_HIDDEN_FIELDS, MetadataFilter, reader_filter
from hopgraph.retrieve.methods import METHODS, SPECS
from hopgraph.retrieve.packing import RetrievalResult
from hopgraph.serve.auth import Principal, TokenBook
from hopgraph.serve.batching import QueryBatcher
from hopgraph.serve.connections import client_key
from hopgraph.serve.errors import APIError, all_finite, non_finite_at, shown
from hopgraph.serve.limits import OverLimit, check_params
from hopgraph.serve.logs import RequestLog, piece_ids, trace_of
from hopgraph.serve.metrics import Metrics
from hopgraph.serve.ratelimit import RateLimiter
from hopgraph.serve.schemas import RetrieveRequest
from hopgraph.serve.state import IndexHolder, JobRunner, Snapshot

T = TypeVar("T")


def check_answer_backend(config: HopgraphConfig) -> None:
    """Refuse ``llm.backend=vllm`` for a server: in-process vLLM is for batch indexing (every worker
    process would load the model on the GPU, and one engine steps one batch at a time, so concurrent
    answers would queue behind each other)."""
    if config.llm.backend == "vllm":
        raise ConfigError(
            "hopgraph serve answers through an OpenAI-compatible server: start `vllm serve MODEL_DIR` and pass "
            "--llm.backend http --llm.base_url http://HOST:PORT/v1 (llm.backend=vllm runs the engine in-process, "
            "for batch indexing)"
        )


class Service:
    """The server's state (live index, jobs, metrics, limiter, LLM) and the rules every endpoint applies."""

    def __init__(self, root: Path, config: HopgraphConfig, tokens: TokenBook):
        check_answer_backend(config)
        self.root, self.config, self.tokens = root, config, tokens
        self.serve = config.serve
        limit_compute_threads(self.serve.compute_threads)  # before the first model call (the version warm-up)
        self.holder = IndexHolder(root, config)
        # Concurrent requests' questions share embedding calls (serve.batch_wait_ms, batch_max, batch_group).
        self.batcher = QueryBatcher(self.serve.batch_wait_ms, self.serve.batch_max, self.serve.batch_group)
        self.request_log = RequestLog.open(self.serve.request_log)
        self.jobs = JobRunner(root, self.holder, config)
        self.upload_slots = threading.BoundedSemaphore(config.serve.max_uploads)  # uploads read at once
        log = self.request_log
        self.metrics = Metrics(log_dropped=(lambda: log.dropped) if log is not None else None)
        self.limiter = RateLimiter(self.serve.rate_limit, self.serve.rate_burst)
        # No completion cache for answers: every reader's question would add a row that nothing prunes,
        # holding text of documents that may since have been deleted (builds keep theirs: extraction).
        self.llm = open_llm(
            config.llm.model_copy(update={"timeout": self.serve.answer_timeout, "retries": 0, "cache": ""})
        )
        # Answers wait for the LLM here, never in the pool that serves retrieval; the semaphore bounds
        # how many wait for a slot, and for how long (serve.answer_timeout).
        self.answer_pool = ThreadPoolExecutor(
            max_workers=self.serve.answer_concurrency, thread_name_prefix="hopgraph-answer"
        )
        self.answer_slots = asyncio.Semaphore(self.serve.answer_concurrency)
        # Slots each user holds (or waits on): one reader asking for long answers over and over kept
        # every slot, and everyone else's answers waited until they failed.
        self.answering: Counter[str] = Counter()
        self.own_turns = asyncio.Condition()
        self.own_slots = self.serve.answer_slots_per_user or max(1, self.serve.answer_concurrency // 2)
        self.busy_retry = str(max(1, math.ceil(self.serve.answer_timeout)))

    # ------------------------------------------------------------------ who is asking
    def authenticate(self, request: Request) -> Principal:
        """The token's principal; 401 without a known token, 429 over the per-token rate."""
        # A request with a body was admitted before it was read (GuardMiddleware): not looked up or counted twice.
        who = getattr(request.state, "principal", None)
        if who is None:
            who = self.admit(request.headers.get("authorization", ""), request.client.host if request.client else "?")
        request.state.user = who.user
        return who

    def admit(self, authorization: str, client: str) -> Principal:
        """:meth:`known`, and counted against the token's rate (429 over it): before a body is read, a
        reader's 3 MB bodies refused for what they hold came at any rate."""
        who = self.known(authorization, client)
        wait = self.limiter.allow(hashlib.sha256(authorization.partition(" ")[2].strip().encode()).hexdigest())
        if wait:
            self.metrics.rate_limited.inc()
            raise APIError(
                429,
                "rate_limited",
                f"rate limit of {self.serve.rate_limit:g} requests/s exceeded",
                {"Retry-After": str(max(1, round(wait)))},
            )
        return who

    def known(self, authorization: str, client: str) -> Principal:
        """The principal of a bearer ``authorization`` header. APIError 401 without one or with an
        unknown token: guessing (or sending no token) is rate-limited per client address, 429."""
        scheme, _, token = authorization.partition(" ")
        who = self.tokens.lookup(token.strip()) if scheme.lower() == "bearer" and token.strip() else None
        if who is not None:
            return who
        wait = self.limiter.allow(f"unknown-token@{client_key(client)}")  # an IPv6 client: its /64
        if wait:
            self.metrics.rate_limited.inc()
            raise APIError(
                429,
                "rate_limited",
                "too many requests without a known token",
                {"Retry-After": str(max(1, round(wait)))},
            )
        if scheme.lower() != "bearer" or not token.strip():
            raise APIError(
                401,
                "unauthenticated",
                "missing bearer token (Authorization: Bearer <token>)",
                {"WWW-Authenticate": "Bearer"},
            )
        raise APIError(401, "unauthenticated", "unknown token", {"WWW-Authenticate": "Bearer"})

    def reader_filter(self, who: Principal, where: dict[str, Any], index: Any) -> MetadataFilter:
        try:
            return reader_filter(
                index,
                where,
                groups=who.groups,
                allow_unrestricted=self.serve.unrestricted_documents == "everyone",
                max_keys=self.serve.max_filter_keys,
                max_values=self.serve.max_filter_values,
                hidden=() if who.admin else READER_HIDDEN_FIELDS,
            )
        except ValueError as exc:
            raise APIError(422, "invalid_filter", f"where: {exc}") from None

    # ------------------------------------------------------------------ retrieval
    def _retrieve_in(self, request: Request, body: RetrieveRequest, who: Principal, snap: Snapshot) -> RetrievalResult:
        serve = self.serve
        method = body.method or self.config.retrieval.method
        request.state.method = method if method in METHODS else "unknown"
        if method not in METHODS:
            raise APIError(
                400, "unknown_method", f"unknown method {shown(method)}; this index offers {', '.join(snap.methods)}"
            )
        if method not in snap.methods:
            raise APIError(
                400,
                "unsupported_method",
                f"method {shown(method)} needs LLM-built parts this index lacks; it offers {', '.join(snap.methods)}",
            )
        if len(body.query) > serve.max_query_chars:
            raise APIError(
                422,
                "query_too_long",
                f"query of {len(body.query)} characters; the limit is {serve.max_query_chars} (serve.max_query_chars)",
            )
        if body.budget is not None and body.budget > serve.max_budget:
            raise APIError(
                422,
                "budget_too_large",
                f"budget {cut(str(body.budget))} over the server's limit {serve.max_budget} (serve.max_budget)",
            )
        overrides = dotted_keys(body.params)
        if "budget" in overrides or "method" in overrides:
            raise APIError(422, "invalid_request", "give method and budget as fields of the request, not in params")
        try:
            check_params(overrides, serve.request_limits, snap.retriever.config)
        except OverLimit as exc:
            raise APIError(422, "over_limit", str(exc)) from None
        flt = self.reader_filter(who, body.where, snap.index)
        # No lock across the retrieval: the models lock themselves per call, so a long search
        # only ever delays others by one model call, and the deadline stops it. The question's
        # vector comes from a batch shared with concurrent requests; its wait counts in the deadline.
        deadline = serve.request_deadline
        try:
            with deadline_after(deadline):  # one deadline for the embedding and the search together
                vector = None  # bm25 reads no vector
                if SPECS[method].embeds:
                    vector = self.batcher.embed(body.query, snap.retriever.embedder.encode_queries, deadline)
                    check_deadline()
                return snap.retriever.retrieve(
                    body.query,
                    method=method,
                    budget=body.budget,
                    metadata_filter=flt,
                    vector=vector,
                    overrides=overrides,
                    deadline=deadline,
                )
        except DeadlineExceeded as exc:
            raise APIError(504, "deadline_exceeded", f"{exc} (serve.request_deadline)") from None
        except TimeoutError:
            raise APIError(
                504,
                "deadline_exceeded",
                f"the query embedding waited past the deadline of {deadline:g} s (serve.request_deadline)",
            ) from None

    def retrieve(self, request: Request, body: RetrieveRequest, who: Principal) -> tuple[str, RetrievalResult]:
        """The retrieval under a counted snapshot (garbage collection spares its version until it ends);
        returns the version it read and the result."""
        with self.holder.snapshot() as snap:
            result = self._retrieve_in(request, body, who, snap)
        if self.request_log is not None:  # for the request log (written by the middleware): ids, never text
            request.state.version, request.state.pieces = snap.version, piece_ids(result)
            if self.serve.trace:
                request.state.trace = trace_of(result)
        return snap.version, result

    # ------------------------------------------------------------------ answers
    @contextlib.asynccontextmanager
    async def answer_slot(self, user: str) -> AsyncIterator[None]:
        """One of the bounded answer slots for the time of the block, at most ``own_slots`` of them
        ``user``'s; 429 when the user's own stay busy, 503 when every slot stays busy."""
        serve = self.serve
        deadline = time.monotonic() + serve.answer_timeout
        try:
            # asyncio.timeout, not wait_for: wait_for (3.11) waits in a task of its own, which held the
            # turn lock for an extra turn of the loop, and could swallow a hung-up client's cancellation.
            async with self.own_turns, asyncio.timeout(serve.answer_timeout):
                await self.own_turns.wait_for(lambda: self.answering[user] < self.own_slots)
                self.answering[user] += 1
        except TimeoutError:
            raise APIError(
                429,
                "answers_busy_for_user",
                f"your {self.own_slots} answer slot(s) stayed busy with your other answers for "
                f"{serve.answer_timeout:g} s (serve.answer_slots_per_user); try again once they are done",
                {"Retry-After": self.busy_retry},
            ) from None
        try:
            try:
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    await self.answer_slots.acquire()
            except TimeoutError:
                raise APIError(
                    503,
                    "answers_busy",
                    f"all {serve.answer_concurrency} answer slots stayed busy for {serve.answer_timeout:g} s; try "
                    "again later",
                    {"Retry-After": self.busy_retry},
                ) from None
            try:
                yield
            finally:
                self.answer_slots.release()
        finally:
            # Given back at once: a stream whose client hung up is cancelled here, and a count given
            # back only once the turn lock was had was lost whenever that wait was cancelled too
            # (each loss one of the user's slots, until a restart). The wake-up is shielded.
            self.answering[user] -= 1
            if not self.answering[user]:
                del self.answering[user]  # a user who has gone leaves nothing behind
            with anyio.CancelScope(shield=True):
                async with self.own_turns:
                    self.own_turns.notify_all()

    async def generate(self, request: Request, result: RetrievalResult) -> tuple[Answer, Usage]:
        """The answer to a retrieval and the tokens it took, in a bounded answer slot; 503 when every slot stays busy.

        A client that hangs up before the answer is ready stops it: the slot is given back and the
        connection to an HTTP LLM closed (which stops the generation there), not held until the model
        ends. An answer still unwritten after serve.answer_timeout is a 503, as a silent LLM is.
        """
        generation = Generation(self, result)
        await while_connected(request, self._written(generation, request.state.user))  # waiting for a slot too
        assert generation.reply is not None  # set when texts() ends
        return generation.reply, generation.usage

    async def _written(self, generation: Generation, user: str) -> None:
        async with self.answer_slot(user):
            await drained(self.in_time(generation.texts()))

    async def in_time(self, texts: AsyncGenerator[str, None]) -> AsyncGenerator[str, None]:
        """The pieces of an answer while serve.answer_timeout has not passed since the first was
        asked for: the whole answer, streamed or not, not the gap between pieces (a model that
        writes a token every few seconds, forever, held a stream's answer slot for good)."""
        deadline = asyncio.get_running_loop().time() + self.serve.answer_timeout
        async with aclosing(texts):
            while True:
                try:
                    async with asyncio.timeout_at(deadline):  # around the wait only, never a yield
                        piece = await anext(texts)
                except StopAsyncIteration:
                    return
                except TimeoutError:
                    raise LLMUnavailableError(
                        f"the LLM took longer than serve.answer_timeout ({self.serve.answer_timeout:g} s) to answer"
                    ) from None
                yield piece

    def count_tokens(self, usage: Usage) -> None:
        self.metrics.llm_tokens.labels("prompt").inc(usage.prompt_tokens)
        self.metrics.llm_tokens.labels("completion").inc(usage.completion_tokens)

    async def retrieve_async(
        self, request: Request, body: RetrieveRequest, who: Principal
    ) -> tuple[str, RetrievalResult]:
        """:meth:`retrieve` off the event loop (for async endpoints)."""
        return await run_in_threadpool(self.retrieve, request, body, who)

    def close(self) -> None:
        self.answer_pool.shutdown(wait=False, cancel_futures=True)
        self.batcher.close()
        if self.request_log is not None:
            self.request_log.close()


class Generation:
    """One answer as the model writes it: iterate :meth:`texts` for its pieces of text (streamed from
    an HTTP backend, the first one empty once the LLM has accepted the request); ``reply`` and
    ``usage`` are set once they end. The one path of streamed and whole answers, so both fit
    evidence, count tokens and read citations alike."""

    def __init__(self, service: Service, result: RetrievalResult):
        self.service, self.result = service, result
        self.reply: Answer | None = None
        self.usage = Usage()

    async def texts(self) -> AsyncGenerator[str, None]:
        service, result, config = self.service, self.result, self.service.config.answer
        keep = await asyncio.get_running_loop().run_in_executor(  # counts tokens: off the event loop
            service.answer_pool, evidence_that_fits, result, config, context_window(service.llm)
        )
        if not keep:  # no evidence, or none that fits: "not found" without a call
            self.reply = not_found(result, config)
            return
        pieces: list[Completion] = []
        chat = answer_request(result, config, keep)
        async with aclosing(stream_completion(service.llm, chat, service.answer_pool)) as stream:
            async for piece in stream:  # closing this generator early closes the LLM connection
                refusal_error([piece])  # a refused request is one piece: raised before any text
                pieces.append(piece)
                yield piece.text
        done = joined(pieces)
        self.usage.add([done])
        service.count_tokens(self.usage)
        self.reply = read_answer(done.text, result, config, keep)


async def drained(texts: AsyncGenerator[str, None]) -> None:
    async with aclosing(texts):
        async for _ in texts:
            pass


async def hung_up(request: Request) -> None:
    """Returns when the client closes its connection (the body is read: only the disconnect is left)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def while_connected(request: Request, work: Awaitable[T]) -> T:
    """``work``, cancelled as soon as the client hangs up (then 499, which only the request log sees):
    a response that has not started cannot notice otherwise, and would hold what it holds (or wait
    in the queue for an answer slot) until the work ends."""
    task, watch = asyncio.ensure_future(work), asyncio.ensure_future(hung_up(request))
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if task.cancelled():
        if not watch.cancelled() and watch.exception() is not None:
            raise watch.exception()  # type: ignore[misc]  # reading the request failed: not a hang-up
        raise APIError(499, "client_closed", "the client closed the connection before the answer was ready")
    return task.result()


def finite(payload: dict[str, Any]) -> dict[str, Any]:
    """JSON has no Infinity/NaN: a result with one is refused, never sent as null or as a bare literal."""
    found = None if all_finite(payload) else non_finite_at(payload)
    if found:
        raise APIError(
            422,
            "non_finite_result",
            f"{found} is not a finite number: the request's params make scores overflow; use smaller settings",
        )
    return payload


class FastJSON(Response):
    """JSON rendered by orjson (several times faster than the standard library on retrieval results).

    orjson writes NaN and Infinity as null: payloads go through :func:`finite` first, which refuses them.
    """

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)


def finite_response(payload: dict[str, Any]) -> FastJSON:
    """The payload as a fast JSON response, refused with 422 if a number in it is not finite."""
    return FastJSON(finite(payload))


def answer_payload(
    reply: Answer, result: RetrievalResult, version: str, evidence: list[dict[str, Any]]
) -> dict[str, Any]:
    """The structured answer: the body of /v1/answer and the ``hopgraph`` field of a chat completion."""
    return {
        "answer": reply.text,
        "found": reply.found,
        "citations": reply.citations,
        "version": version,
        "evidence": evidence,
        "evidence_dropped": reply.evidence_dropped,
        "method": result.method,
        "budget": result.budget,
    }


# ---------------------------------------------------------------------- dependencies of the routers
# The dependencies below are ``async``: a plain ``def`` runs in the thread pool, and a request
# would then wait for a free thread (behind slow uploads, say) before it could even be refused.
async def service_of(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


# Declares the bearer scheme in the OpenAPI schema (so "Authorize" in /docs sends the token); it never
# refuses by itself: :meth:`Service.authenticate` does, with the server's own JSON errors.
bearer = HTTPBearer(
    scheme_name="bearer",
    description="A token from serve.tokens_file or $HOPGRAPH_TOKENS, sent as `Authorization: Bearer <token>`.",
    auto_error=False,
)


async def principal(request: Request, _: HTTPAuthorizationCredentials | None = Depends(bearer)) -> Principal:
    """Dependency: the authenticated caller (see :meth:`Service.authenticate`)."""
    return (await service_of(request)).authenticate(request)


async def admin(who: Principal = Depends(principal)) -> Principal:
    """Dependency: the caller, who must hold the admin scope (403 otherwise)."""
    return who.require_admin()
