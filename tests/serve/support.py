"""Helpers shared by the server tests and the ACL benchmark (``scripts/bench_acl.py``): a real uvicorn
server on a loopback port (:class:`LiveServer`) or `hopgraph serve` as a child process
(:class:`ServeProcess`), users and restricted documents, and the ACL audit (:func:`audit_acl`).
Fixtures live in ``conftest.py``; these are plain importable helpers."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from hopgraph.config import HopgraphConfig
from hopgraph.llm.standin import free_port
from hopgraph.serve.app import create_app
from hopgraph.serve.auth import TokenBook
from hopgraph.serve.connections import uvicorn_options
from hopgraph.serve.errors import OPENAI_PATHS


def refused(path: str) -> int:
    """The status of a request the server cannot take: hopgraph's 422, OpenAI's 400 on its endpoints."""
    return 400 if path.startswith(OPENAI_PATHS) else 422


# Users with overlapping groups; documents without acl are readable by everyone (the default).
USERS = {
    "admin": {"token": "admin-token-0123456789", "groups": ["board", "operations", "legal"], "admin": True},
    "bo": {"token": "board-token-0123456789", "groups": ["board"]},
    "ops": {"token": "ops-token-01234567890", "groups": ["operations"]},
    "legal": {"token": "legal-token-012345678", "groups": ["legal", "operations"]},
    "guest": {"token": "guest-token-012345678", "groups": []},
    "press": {"token": "press-token-012345678", "groups": ["press"]},
}

# Restricted documents, each with a codeword that occurs nowhere else: finding a codeword in a
# response a reader may not see means text (or a description derived from it) leaked.
SECRET_DOCUMENTS = [
    {
        "id": "secret-legal",
        "title": "Settlement terms",
        "acl": ["legal"],
        "text": "The settlement with the Sorvik ferry company is code-named QUARTZFERN. The Halvern Harbor "
        "Institute pays 2.4 million to the ferry company over three years.",
    },
    {
        "id": "secret-board",
        "title": "Board succession",
        "acl": ["board"],
        "text": "The board plans to replace its chair Priya Anand with the hydrologist Tomas Wrenfield in 2026 "
        "under the plan VELLUMTIDE. Lake Orrin monitoring moves to Castel Brun.",
    },
    {
        "id": "secret-ops",
        "title": "Vessel incident",
        "acl": ["operations"],
        "text": "The research vessel Long Reach ran aground near the island of Tem during the MARROWGLEN survey. "
        "Jonah Brekke led the rescue with a Sorvik ferry.",
    },
]
CODEWORDS = {"secret-legal": "QUARTZFERN", "secret-board": "VELLUMTIDE", "secret-ops": "MARROWGLEN"}


def token_book() -> TokenBook:
    return TokenBook.from_records(
        [
            {"token": u["token"], "user": name, "groups": u["groups"], "admin": u.get("admin", False)}
            for name, u in USERS.items()
        ],
        "test tokens",
    )


def auth(user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {USERS[user]['token']}"}


class LiveServer:
    """``create_app`` served by uvicorn in a thread on 127.0.0.1: real HTTP, real sockets."""

    def __init__(self, root: Path, config: HopgraphConfig, tokens: TokenBook | None = None, app: Any = None):
        # Bound now, listening once started: a port only looked up here could be taken by another
        # test's server or stand-in while the index loads.
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.socket.bind(("127.0.0.1", 0))
        self.port = self.socket.getsockname()[1]
        app = app or create_app(root, config, tokens or token_book())
        self.app = app
        self.server = uvicorn.Server(
            uvicorn.Config(
                app, host="127.0.0.1", port=self.port, log_level="error", lifespan="on", **uvicorn_options(config.serve)
            )
        )
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("test server did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.socket.close()


def wait_for_job(client: httpx.Client, job_id: str, timeout: float = 300) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}", headers=auth("admin")).json()
        if job["status"] in ("done", "failed"):
            return job
        time.sleep(0.2)
    raise TimeoutError(f"job {job_id} did not finish in {timeout} s")


def log_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON lines a server has written to ``path`` so far; a line still being written (no newline
    yet) is left for the next look, so polling this never trips on half a line."""
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines()]


def wait_until(predicate: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        time.sleep(0.1)


@dataclass
class AclReport:
    queries: int = 0
    by_method: dict[str, int] = field(default_factory=dict)
    forbidden_chunks: int = 0  # pieces of forbidden documents in contexts, citations or paths
    leaked_codewords: int = 0  # codewords of forbidden documents anywhere in a response
    errors: int = 0
    violations: list[dict[str, Any]] = field(default_factory=list)


def allowed_documents(groups: Iterable[str], doc_acl: dict[str, list[str] | None]) -> set[str]:
    mine = set(groups)
    return {d for d, acl in doc_acl.items() if acl is None or mine & set(acl)}


def audit_acl(
    client: httpx.Client,
    methods: Sequence[str],
    doc_acl: dict[str, list[str] | None],
    vocabulary: Sequence[str],
    queries: int,
    seed: int = 0,
    endpoint: str = "/v1/retrieve",
) -> AclReport:
    """Random queries by random users over every method; counts anything a reader may not see."""
    rng = random.Random(seed)
    report = AclReport()
    users = list(USERS)
    for n in range(queries):
        user, method = rng.choice(users), methods[n % len(methods)]
        words = rng.sample(vocabulary, k=rng.randint(2, 6)) + (
            [rng.choice(list(CODEWORDS.values()))] if rng.random() < 0.5 else []
        )
        body = {"query": " ".join(words), "method": method, "budget": rng.choice([200, 600, 2000])}
        response = client.post(endpoint, json=body, headers=auth(user))
        report.queries += 1
        report.by_method[method] = report.by_method.get(method, 0) + 1
        if response.status_code != 200:
            report.errors += 1
            report.violations.append(
                {"user": user, "method": method, "status": response.status_code, "body": response.text[:300]}
            )
            continue
        allowed = allowed_documents(USERS[user]["groups"], doc_acl)
        payload = response.json()
        seen = {d for ev in payload["evidence"] for d in ev["doc_ids"]} | {
            d for c in payload.get("citations", []) for d in c["doc_ids"]
        }
        bad = seen - allowed
        text = json.dumps({k: v for k, v in payload.items() if k != "query"})
        # A codeword the query itself names proves nothing when an answer repeats it (models echo
        # the question); forbidden pieces are still counted for those queries above.
        leaked = [w for d, w in CODEWORDS.items() if d not in allowed and w in text and w not in body["query"]]
        report.forbidden_chunks += sum(1 for ev in payload["evidence"] if set(ev["doc_ids"]) - allowed)
        report.leaked_codewords += len(leaked)
        if bad or leaked:
            report.violations.append(
                {
                    "user": user,
                    "method": method,
                    "query": body["query"],
                    "forbidden_docs": sorted(bad),
                    "codewords": leaked,
                }
            )
    return report


# ---------------------------------------------------------------- `hopgraph serve` as a child process
REFRESH = 0.5  # serve.refresh_seconds of the servers below
TOKENS = json.dumps(
    [
        {"token": u["token"], "user": name, "groups": u["groups"], "admin": u.get("admin", False)}
        for name, u in USERS.items()
    ]
)


class ServeProcess:
    """`hopgraph serve INDEX` as a child process on a free loopback port; its output goes to a log file."""

    def __init__(self, index: Path, log: Path, *options: str, port: int = 0):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        command = [sys.executable, "-m", "hopgraph.cli", "serve", str(index), "--serve.port", str(self.port)]
        command += ["--serve.rate_limit", "0", "--serve.refresh_seconds", str(REFRESH), *options]
        with open(log, "wb") as out:
            self.process = subprocess.Popen(
                command, env={**os.environ, "HOPGRAPH_TOKENS": TOKENS}, stdout=out, stderr=subprocess.STDOUT
            )
        self.pid = self.process.pid

    def wait_ready(self, timeout: float = 180) -> ServeProcess:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"server did not answer in {timeout} s:\n{self.log.read_text()[-3000:]}")

    def version(self) -> str:
        return str(httpx.get(f"{self.url}/healthz", timeout=10).json()["version"])

    def retrieve(self, query: str, user: str = "admin") -> dict[str, Any]:
        response = httpx.post(
            f"{self.url}/v1/retrieve",
            json={"query": query, "method": "ppr", "budget": 600},
            headers=auth(user),
            timeout=60,
        )
        assert response.status_code == 200, response.text
        return dict(response.json())

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def until(predicate: Any, timeout: float) -> float:
    """Seconds until ``predicate()`` held; TimeoutError after ``timeout``."""
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"condition not reached in {timeout} s")
        time.sleep(0.05)
    return time.monotonic() - started
