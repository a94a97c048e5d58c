"""vLLM's in-process engine, as far as it can be checked without vLLM (not installable on a CPU machine)."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest

from hopgraph.config import LLMConfig
from hopgraph.errors import DependencyError
from hopgraph.llm.vllm_engine import VllmEngine, check_vllm_version, engine_arguments, run_engine_loop


@pytest.mark.parametrize("version", ["0.11.0", "0.11.1rc2.dev3+gabc123", "0.12.0", "1.0.0"])
def test_supported_vllm_versions_pass(version):
    check_vllm_version(version)


@pytest.mark.parametrize("version", ["0.10.2", "0.6.3.post1", "0", "unknown"])
def test_older_vllm_is_refused_with_both_versions_and_the_fix(version):
    with pytest.raises(DependencyError, match=rf"needs vLLM >= 0\.11, but vLLM '{version}' is installed: pip install"):
        check_vllm_version(version)


def test_engine_settings_reach_vllm_llm():
    assert engine_arguments(LLMConfig(model="/models/qwen")) == {
        "model": "/models/qwen",
        "seed": 0,
        "gpu_memory_utilization": 0.9,
        "tensor_parallel_size": 1,
    }  # no max_model_len: vLLM takes the model's own
    config = LLMConfig(model="/m", max_model_len=8192, gpu_memory_utilization=0.6, tensor_parallel_size=2)
    assert engine_arguments(config) == {
        "model": "/m",
        "seed": 0,
        "gpu_memory_utilization": 0.6,
        "tensor_parallel_size": 2,
        "max_model_len": 8192,
    }


class SteppedEngine:
    """Stand-in for vLLM's ``LLMEngine`` (vLLM cannot be installed here): request ``i`` finishes at step
    ``finish_at[i]``, as continuous batching finishes short requests before long ones."""

    def __init__(self, finish_at: list[int]):
        self.finish_at, self.pending, self.steps = finish_at, {}, 0

    def add_request(self, request_id, prompt, params):
        if len(prompt) > 10:  # vLLM's own refusal of a prompt past max_model_len, raised as it raises it
            raise ValueError(
                f"The decoder prompt (length {len(prompt)}) is longer than the maximum model length of 10."
            )
        self.pending[request_id] = int(request_id.rsplit("-", 1)[1])

    def has_unfinished_requests(self):
        return bool(self.pending)

    def abort_request(self, request_ids):
        for rid in request_ids:
            self.pending.pop(rid, None)

    def step(self):
        self.steps += 1
        done = [rid for rid, i in self.pending.items() if self.finish_at[i] == self.steps]
        for rid in done:
            del self.pending[rid]
        return [SimpleNamespace(request_id=rid, finished=True) for rid in done]


def test_each_completion_is_delivered_when_it_finishes_not_after_the_batch():
    """Before, on_done ran only after ``LLM.chat`` returned the whole batch: an interrupted job lost it all."""
    engine = SteppedEngine([3, 1, 2, 1])
    delivered = []
    run_engine_loop(
        engine,
        ["a", "b", "c", "d"],
        [None] * 4,
        lambda i, out, seconds: delivered.append((i, engine.steps)),
        lambda i, why: pytest.fail(why),
    )
    assert sorted(delivered) == [(0, 3), (1, 1), (2, 2), (3, 1)]  # each at the step it finished in
    engine = SteppedEngine([1])
    run_engine_loop(engine, ["again"], [None], lambda i, out, seconds: delivered.append((i, engine.steps)), pytest.fail)
    assert delivered[-1] == (0, 1)  # request ids stay unique across calls on one engine


def test_a_prompt_the_engine_refuses_is_that_requests_refusal_and_the_others_finish():
    """vLLM raises ValueError in add_request for a prompt past max_model_len: it ended the whole
    extraction stage in a traceback, nothing cached, where the HTTP path records one fallback."""
    engine = SteppedEngine([1, 0, 2])
    delivered, refusals = [], []
    run_engine_loop(
        engine,
        ["short", "a prompt far too long", "brief"],
        [None] * 3,
        lambda i, out, seconds: delivered.append(i),
        lambda i, why: refusals.append((i, why)),
    )
    assert sorted(delivered) == [0, 2]
    assert refusals == [(1, "The decoder prompt (length 21) is longer than the maximum model length of 10.")]


class FifoEngine:
    """Stand-in for vLLM's ``LLMEngine``: one request finishes per step, oldest first; its output's
    text is its request id."""

    def __init__(self):
        self.pending: list[str] = []

    def add_request(self, request_id, prompt, params):
        self.pending.append(request_id)

    def has_unfinished_requests(self):
        return bool(self.pending)

    def abort_request(self, request_ids):
        self.pending = [rid for rid in self.pending if rid not in set(request_ids)]

    def step(self):
        rid = self.pending.pop(0)
        return [SimpleNamespace(request_id=rid, finished=True, text=rid)]


def test_a_batch_that_fails_midway_leaves_no_request_for_the_next_one_to_be_handed():
    """A batch whose completion could not be stored (a full disk, say) left its requests in the
    engine, and the next batch was handed their outputs under its own numbers: one prompt's cached
    completion was another prompt's answer."""
    engine = FifoEngine()
    failed = []

    def store_fails(i, out, seconds):
        failed.append(out.text)
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        run_engine_loop(engine, ["a", "b", "c"], [None] * 3, store_fails, pytest.fail)
    assert engine.pending == []  # the rest of that batch is aborted
    engine.pending.append("someone-else-0")  # a request this batch did not add: never delivered as its own
    delivered = []
    run_engine_loop(engine, ["d", "e"], [None] * 2, lambda i, out, _: delivered.append((i, out.text)), pytest.fail)
    batch = delivered[0][1].rsplit("-", 1)[0]
    assert delivered == [(0, f"{batch}-0"), (1, f"{batch}-1")] and not failed[0].startswith(f"{batch}-")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_without_vllm_the_error_says_so(tmp_path):
    with pytest.raises(DependencyError, match="needs vLLM installed"):
        VllmEngine(LLMConfig(backend="vllm", model=str(tmp_path)))
