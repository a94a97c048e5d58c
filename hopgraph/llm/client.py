"""LLM backends behind one interface, with an on-disk cache and token accounting.

Every caller builds :class:`ChatRequest` objects and hands a batch to :meth:`LLM.complete`. The
HTTP backend speaks the OpenAI chat-completions API as served by ``vllm serve`` and the llama.cpp
stand-in; the vLLM backend runs the same requests in-process on a GPU machine. Wrapping either in
:class:`CachedLLM` makes a repeated or resumed run pay for no call twice.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor, as_completed
from contextlib import aclosing
from dataclasses import replace
from pathlib import Path
from typing import Any

from tqdm import tqdm

from hopgraph.cache import storage_errors
from hopgraph.config import LLMConfig
from hopgraph.config.base import llm_address
from hopgraph.errors import LLMRequestError, LLMUnavailableError
from hopgraph.llm.probe import (
    FALLBACK_CONCURRENCY,
    ServedModel,
    auth_headers,
    resolved_concurrency,
    server_answers,
    server_slots,
    start_hint,
)
from hopgraph.llm.types import LLM, ChatRequest, Completion, Done


def retry_after_seconds(value: str | None) -> float | None:
    """Seconds from a Retry-After header given in seconds (an HTTP date or junk counts as absent)."""
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 <= seconds < 86_400 else None


# A refusal of one request: the next request may well be accepted (other 4xx mean wrong settings).
REFUSED_ONE = {400, 413, 422}


def chat_body(config: LLMConfig, request: ChatRequest) -> dict[str, Any]:
    """The OpenAI chat-completions body of a request: every HTTP path (here, Ray's) sends this one."""
    body: dict[str, Any] = {
        "model": config.model,
        "messages": [{"role": role, "content": content} for role, content in request.messages],
        "max_tokens": request.max_tokens,
        "temperature": request.temperature,
        "seed": request.attempt,
    }
    if request.schema is not None and config.structured:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": request.schema, "strict": True},
        }
    return body


def read_chat_response(config: LLMConfig, status: int, text: str, seconds: float) -> Completion:
    """A completion from a final (not retried) HTTP answer; raises where no request could succeed."""
    if status != 200:
        return _refusal(config, status, text, seconds)
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    return completion_from_json(config, data, seconds, text)


def completion_from_json(config: LLMConfig, data: Any, seconds: float, raw: str = "") -> Completion:
    """A completion from a decoded response body (Ray's HTTP processor hands over only the body: an
    error is recognised by its ``error`` object and the code inside it)."""
    error = data.get("error") if isinstance(data, dict) else None
    if error:
        code = error.get("code") if isinstance(error, dict) else None
        code = code if code is not None else data.get("code")
        # A number, or its digits ("429"); any other code ("rate_limit_exceeded") is the server's fault.
        digits = str(code) if isinstance(code, int | str) else ""
        status = int(digits) if digits.isascii() and digits.isdecimal() and len(digits) == 3 else 500
        return _refusal(config, status, json.dumps(error)[:300], seconds)
    try:
        content = data["choices"][0]["message"].get("content") or ""
        usage = data.get("usage") or {}
    except (KeyError, IndexError, TypeError, AttributeError):
        raise LLMUnavailableError(
            f"LLM server {config.base_url} answered HTTP 200 without an OpenAI chat completion: "
            f"{(raw or json.dumps(data, default=str))[:300]!r}"
        ) from None
    return Completion(
        text=content,
        prompt_tokens=int(usage.get("prompt_tokens") or 0),
        completion_tokens=int(usage.get("completion_tokens") or 0),
        seconds=seconds,
    )


def _refusal(config: LLMConfig, status: int, reason: str, seconds: float) -> Completion:
    if status in REFUSED_ONE:
        return Completion("", 0, 0, seconds=seconds, refused=f"HTTP {status}: {reason[:300]}")
    if 400 <= status < 500 and status not in HttpLLM.RETRY_STATUS:  # 408 and 429 are the server's state
        raise LLMRequestError(f"LLM server {config.base_url} refused the request: HTTP {status}: {reason[:300]}")
    raise LLMUnavailableError(f"LLM server {config.base_url} refused the request: HTTP {status}: {reason[:300]}")


class HttpLLM:
    """OpenAI-compatible chat completions over HTTP with a concurrency limit, timeouts and retries.

    Retries are hand-written rather than a retry library's: which failures are worth another try
    (connection errors, 408/429/5xx, but never another 4xx) is the whole policy, and it fits in
    the loop below. A 429 or 503 with Retry-After waits that long (at most llm.timeout) instead of
    the exponential back-off. A timeout from a server that still answers at once is final: the
    server is slow, and the same greedy request would take as long again (a retry would multiply
    the wait, and the message would blame a server that is running).

    ``llm.concurrency`` 0 keeps as many requests in flight as the server has slots (asked once):
    more only queue on the server, where their waiting counts against the timeout.
    """

    RETRY_STATUS = {408, 429, 500, 502, 503, 504}

    def __init__(self, config: LLMConfig):
        import httpx  # noqa: PLC0415

        llm_address(config.base_url)
        self.config = config
        self.name = config.model
        headers = auth_headers(config)
        self._http = httpx.Client(
            base_url=config.base_url.rstrip("/"),
            headers=headers,
            timeout=config.timeout,
            limits=httpx.Limits(max_connections=config.concurrency or None),
        )
        self._concurrency = config.concurrency or None
        self._concurrency_lock = threading.Lock()
        self.served = ServedModel(config)

    @property
    def concurrency(self) -> int:
        """Requests in flight at once: the setting, or (with 0) the server's slot count, asked until
        the server answers (a server that is down then fails the requests themselves, with its message)."""
        with self._concurrency_lock:
            if self._concurrency is None:
                self._concurrency = resolved_concurrency(self.config, self._http.headers)
            return self._concurrency or FALLBACK_CONCURRENCY

    def _body(self, request: ChatRequest) -> dict[str, Any]:
        return chat_body(self.config, request)

    def _slow(self, request: ChatRequest, waited: str) -> LLMUnavailableError:
        """The error for a server that is up but did not finish a request in time."""
        slots = server_slots(self.config, self._http.headers)[1]
        against = f" against the server's {slots} slots" if slots and slots < self.concurrency else ""
        return LLMUnavailableError(
            f"LLM server {self.config.base_url} is slow: {waited} at concurrency {self.concurrency}{against}, "
            f"max_tokens {request.max_tokens} (it is running: it answers GET /v1/models). Raise llm.timeout, or "
            "lower llm.concurrency or max_tokens (llm.max_tokens for extraction, answer.max_tokens for answers), "
            "and run the same command again: finished calls are cached."
        )

    def _down(self, problem: str, attempts: int) -> LLMUnavailableError:
        return LLMUnavailableError(
            f"LLM server {self.config.base_url} is down after {attempts} attempt{'s' * (attempts != 1)}: {problem}. "
            f"Start it, e.g. {start_hint(self.config)}, and run the same command again: finished calls are cached."
        )

    def _one(self, request: ChatRequest) -> Completion:
        import httpx  # noqa: PLC0415

        problem, down = "", False
        asked_wait: float | None = None  # a Retry-After the server sent with its 429/503
        for attempt in range(self.config.retries + 1):
            if attempt:
                backoff = min(0.5 * 2 ** (attempt - 1), 8.0)
                time.sleep(backoff if asked_wait is None else min(max(asked_wait, backoff), self.config.timeout))
                asked_wait = None
            started = time.perf_counter()
            try:
                response = self._http.post("/chat/completions", json=self._body(request))
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                problem, down = f"cannot connect ({exc.__class__.__name__}: {exc})", True
                continue
            except httpx.TimeoutException:
                waited = f"no answer within {self.config.timeout:g} s"
                if server_answers(self.config, self._http.headers):
                    raise self._slow(request, waited) from None
                problem, down = f"{waited}, and none to GET /v1/models either", False
                continue
            except httpx.TransportError as exc:
                problem, down = f"the connection failed ({exc.__class__.__name__}: {exc})", False
                continue
            if response.status_code in self.RETRY_STATUS:
                problem, down = f"HTTP {response.status_code}: {response.text[:200]}", False
                asked_wait = retry_after_seconds(response.headers.get("retry-after"))
                continue
            try:
                return read_chat_response(
                    self.config, response.status_code, response.text, time.perf_counter() - started
                )
            except LLMUnavailableError as exc:
                if response.status_code != 200:
                    raise
                # A 200 without a completion (a proxy's garbled page) or with a server's error object
                # inside (a 429 or 503 said in the body): as worth another try as the status itself.
                problem, down = str(exc).removeprefix(f"LLM server {self.config.base_url} "), False
                continue
        attempts = self.config.retries + 1
        if down:
            raise self._down(problem, attempts)
        raise LLMUnavailableError(
            f"LLM server {self.config.base_url} is failing after {attempts} attempts: {problem}. See its log, then "
            "run the same command again: finished calls are cached."
        )

    async def stream(self, request: ChatRequest) -> AsyncGenerator[Completion, None]:
        """The completion in pieces as the server writes them (``stream: true``): their texts
        concatenate to the answer and their token counts add up to its usage.

        One attempt, never retried: pieces may already be on their way to a reader. Closing the
        iterator early closes the connection, which stops the generation on the server. The first
        piece of a streamed answer is empty, as soon as the server has accepted the request (its 200
        is in, before its first token): a caller can tell a refusal or a server that is down, which
        raise before it, from a failure mid-answer.
        """
        import httpx  # noqa: PLC0415

        body = {**self._body(request), "stream": True, "stream_options": {"include_usage": True}}
        started = time.perf_counter()
        try:
            async with (
                httpx.AsyncClient(
                    base_url=self.config.base_url.rstrip("/"), headers=self._http.headers, timeout=self.config.timeout
                ) as client,
                client.stream("POST", "/chat/completions", json=body) as response,
            ):
                if response.status_code != 200 or "json" in response.headers.get("content-type", ""):
                    # A refusal, or a server that answers whole although asked to stream.
                    text = (await response.aread()).decode("utf-8", "replace")
                    if response.status_code in self.RETRY_STATUS:
                        raise LLMUnavailableError(
                            f"LLM server {self.config.base_url} is busy or failing: HTTP {response.status_code}: "
                            f"{text[:200]}"
                        )
                    yield read_chat_response(self.config, response.status_code, text, time.perf_counter() - started)
                    return
                yield Completion(text="", prompt_tokens=0, completion_tokens=0)  # accepted
                async for line in _lines(response):
                    data = line[5:].strip() if line.startswith("data:") else ""
                    if data == "[DONE]":
                        return
                    if data:
                        yield _piece(self.config, data)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise self._down(f"cannot connect ({exc.__class__.__name__}: {exc})", 1) from None
        except httpx.TimeoutException:
            waited = f"wrote nothing for {self.config.timeout:g} s"
            if server_answers(self.config, self._http.headers):
                raise self._slow(request, waited) from None
            raise LLMUnavailableError(
                f"LLM server {self.config.base_url} {waited} and does not answer GET /v1/models either"
            ) from None
        except httpx.TransportError as exc:
            raise LLMUnavailableError(
                f"LLM server {self.config.base_url}: the connection failed ({exc.__class__.__name__}: {exc})"
            ) from None

    def complete(
        self, requests: Sequence[ChatRequest], *, progress: bool = False, desc: str = "llm", on_done: Done | None = None
    ) -> list[Completion]:
        out: list[Completion | None] = [None] * len(requests)
        with (
            ThreadPoolExecutor(max_workers=self.concurrency if requests else 1) as pool,
            tqdm(total=len(requests), desc=desc, unit="call", disable=not progress or not requests) as bar,
        ):
            futures = {pool.submit(self._one, r): i for i, r in enumerate(requests)}
            try:
                for future in as_completed(futures):
                    i = futures[future]
                    completion = future.result()
                    out[i] = completion
                    if on_done:
                        on_done(i, completion)
                    bar.update(1)
            except BaseException:
                for future in futures:
                    future.cancel()
                self._keep_running(futures, out, on_done)
                raise
        return [c for c in out if c is not None]

    @staticmethod
    def _keep_running(
        futures: dict[Future[Completion], int], out: list[Completion | None], on_done: Done | None
    ) -> None:
        """After a failure, the requests already sent: the pool waits for them anyway, so what they
        bring goes to ``on_done`` (the cache) too, and a re-run does not pay for them again."""
        for future, i in futures.items():
            if future.cancelled() or out[i] is not None:
                continue
            try:
                out[i] = completion = future.result()
                if on_done:
                    on_done(i, completion)
            except Exception:  # noqa: BLE001, S112 - the first failure is the one raised (a Ctrl-C is not caught)
                continue


def _piece(config: LLMConfig, data: str) -> Completion:
    """One server-sent event of a streamed chat completion as a piece (text and any usage it carries)."""
    try:
        event = json.loads(data)
        if event.get("error"):
            raise LLMUnavailableError(f"LLM server {config.base_url} failed mid-answer: {data[:300]}")
        choices = event.get("choices") or [{}]
        usage = event.get("usage") or {}
        return Completion(
            text=(choices[0].get("delta") or {}).get("content") or "",
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
        )
    except (ValueError, TypeError, AttributeError, IndexError):
        raise LLMUnavailableError(
            f"LLM server {config.base_url} streamed something other than chat completion chunks: {data[:300]!r}"
        ) from None


class CompletionCache:
    """Completions keyed by (model, request) in SQLite (WAL: safe across processes and threads)."""

    def __init__(self, path: str | Path):
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        with storage_errors(self.path):  # a full disk says so in one line (hopgraph.errors.storage_state)
            self._db = sqlite3.connect(self.path, timeout=60, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS completions (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            self._db.execute("CREATE TABLE IF NOT EXISTS served (asked TEXT PRIMARY KEY, said TEXT NOT NULL)")

    def served(self, asked: str, said: str | None) -> str:
        """What a server asked for model ``asked`` serves: ``said`` (remembered), or while no server
        can be asked, what one said last, so its cached completions are found with it down."""
        with self._lock, storage_errors(self.path):
            row = self._db.execute("SELECT said FROM served WHERE asked = ?", (asked,)).fetchone()
            if said is None:
                return str(row[0]) if row else ""
            if row is None or row[0] != said:
                with self._db:
                    self._db.execute("INSERT OR REPLACE INTO served (asked, said) VALUES (?, ?)", (asked, said))
            return said

    def get(self, key: str) -> Completion | None:
        with self._lock, storage_errors(self.path):
            row = self._db.execute("SELECT value FROM completions WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        data = json.loads(row[0])
        return Completion(
            text=data["text"],
            prompt_tokens=data["prompt_tokens"],
            completion_tokens=data["completion_tokens"],
            cached=True,
        )

    def put(self, key: str, completion: Completion) -> None:
        value = json.dumps(
            {
                "text": completion.text,
                "prompt_tokens": completion.prompt_tokens,
                "completion_tokens": completion.completion_tokens,
            }
        )
        with self._lock, storage_errors(self.path), self._db:
            self._db.execute("INSERT OR REPLACE INTO completions (key, value) VALUES (?, ?)", (key, value))


class CachedLLM:
    """Answers repeated requests from the cache; each new completion is stored as soon as it arrives."""

    def __init__(self, inner: LLM, cache: CompletionCache):
        self.inner, self.cache, self.name = inner, cache, inner.name

    def keys(self, requests: Sequence[ChatRequest]) -> list[str]:
        """The cache keys of ``requests``: ``llm.model`` and, for a server, the model it says it serves
        (llama.cpp answers any ``llm.model`` with whatever it loaded: a server restarted with another
        model was answered from the first one's completions)."""
        if not requests:
            return []
        served = getattr(self.inner, "served", None)
        said = self.cache.served(served.where, served()) if isinstance(served, ServedModel) else ""
        return [r.key(f"{self.name}@{said}" if said else self.name) for r in requests]

    def complete(
        self, requests: Sequence[ChatRequest], *, progress: bool = False, desc: str = "llm", on_done: Done | None = None
    ) -> list[Completion]:
        keys = self.keys(requests)
        out: list[Completion | None] = [self.cache.get(k) for k in keys]
        # A request repeated in the batch (a chunk ingested twice, boilerplate) is sent once: its
        # copies get the same completion, as a cache hit.
        missing: dict[str, list[int]] = {}  # key → the requests asking it, the first one sent
        for i, c in enumerate(out):
            if c is None:
                missing.setdefault(keys[i], []).append(i)
        asked = list(missing.values())

        def store(j: int, completion: Completion) -> None:  # each completion is kept the moment it arrives
            if not completion.refused:  # a refusal may not be final (another server, a longer context)
                self.cache.put(keys[asked[j][0]], completion)
            for n, k in enumerate(asked[j]):
                copy = completion if n == 0 or completion.refused else replace(completion, cached=True, seconds=0.0)
                out[k] = copy
                if on_done:
                    on_done(k, copy)

        if on_done:
            for i, c in enumerate(out):
                if c is not None:
                    on_done(i, c)
        self.inner.complete([requests[ix[0]] for ix in asked], progress=progress, desc=desc, on_done=store)
        return [c for c in out if c is not None]


def context_window(llm: Any) -> int:
    """The served model's context size in tokens, from the backend's settings (through any cache)."""
    while hasattr(llm, "inner"):
        llm = llm.inner
    config = getattr(llm, "config", None)
    return config.context_tokens if isinstance(config, LLMConfig) else LLMConfig().context_tokens


def open_llm(config: LLMConfig, backend: LLM | None = None) -> LLM:
    """The configured backend (or ``backend``, e.g. the Ray engine's), cached unless ``config.cache`` is empty."""
    if backend is not None:
        llm: LLM = backend
    elif config.backend == "vllm":
        from hopgraph.llm.vllm_engine import VllmEngine  # noqa: PLC0415

        llm = VllmEngine(config)
    else:
        llm = HttpLLM(config)
    return CachedLLM(llm, CompletionCache(config.cache)) if config.cache else llm


async def _lines(response: Any) -> AsyncIterator[str]:
    """The lines of a streamed response, split at "\n" only: httpx's ``aiter_lines`` also splits at
    U+2028, U+2029 and U+0085, which vLLM and llama.cpp write unescaped inside the JSON of a chunk (a
    model quoting a document that holds one failed the whole answer)."""
    pending = ""
    async for text in response.aiter_text():
        *lines, pending = (pending + text).split("\n")
        for line in lines:
            yield line.removesuffix("\r")
    if pending:
        yield pending.removesuffix("\r")


async def stream_completion(
    llm: LLM, request: ChatRequest, executor: Executor | None = None
) -> AsyncGenerator[Completion, None]:
    """One completion in pieces (see :meth:`HttpLLM.stream`): streamed where the backend speaks HTTP
    (and stored in the cache once complete), else whole in one piece: from the cache, or from
    ``complete`` on ``executor`` for in-process backends."""
    cache = llm.cache if isinstance(llm, CachedLLM) else None
    inner = llm.inner if isinstance(llm, CachedLLM) else llm
    loop = asyncio.get_running_loop()
    # Off the event loop: the key may ask the LLM server what it serves (seconds, at worst).
    key = (await loop.run_in_executor(executor, llm.keys, [request]))[0] if isinstance(llm, CachedLLM) else ""
    hit = cache.get(key) if cache else None
    if hit is not None or not isinstance(inner, HttpLLM):
        if hit is None:
            (hit,) = await loop.run_in_executor(executor, llm.complete, [request])
        yield hit
        return
    pieces = []
    async with aclosing(inner.stream(request)) as stream:
        async for piece in stream:
            pieces.append(piece)
            yield piece
    done = joined(pieces)
    if cache and not done.refused:
        cache.put(key, done)


def joined(pieces: Sequence[Completion]) -> Completion:
    """The whole completion of streamed pieces: their texts and token counts together."""
    return Completion(
        text="".join(p.text for p in pieces),
        prompt_tokens=sum(p.prompt_tokens for p in pieces),
        completion_tokens=sum(p.completion_tokens for p in pieces),
        seconds=sum(p.seconds for p in pieces),
        cached=all(p.cached for p in pieces) and bool(pieces),
        refused=next((p.refused for p in pieces if p.refused), ""),
    )
