"""One meaning of ``device`` for kernels and models, and the one helper that moves a graph to the array module."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from hopgraph.errors import DependencyError
from hopgraph.kernels import array_module, resolve_device, sparse_on
from hopgraph.kernels.backend import cupy_available, torch_cuda_available
from hopgraph.models import resolve_device as model_device


def test_cpu_is_cpu_and_auto_follows_the_library_that_runs_the_work():
    assert resolve_device("cpu", "cupy") == resolve_device("cpu", "torch") == "cpu"
    assert resolve_device("auto", "cupy") == ("cuda" if cupy_available() else "cpu")
    assert resolve_device("auto", "torch") == ("cuda" if torch_cuda_available() else "cpu")
    assert model_device("auto") == resolve_device("auto", "torch")
    assert (array_module("auto") is np) == (resolve_device("auto", "cupy") == "cpu")
    with pytest.raises(ValueError, match="auto, cpu or cuda"):
        resolve_device("gpu")


@pytest.mark.skipif(torch_cuda_available(), reason="torch sees a CUDA device here")
def test_explicit_cuda_for_a_model_without_a_device_is_refused_with_the_fix():
    # Before, models passed "cuda" on to torch unchecked and failed inside it.
    with pytest.raises(DependencyError, match="device 'cuda' was requested but torch cannot use a CUDA device"):
        model_device("cuda")


@pytest.mark.skipif(cupy_available(), reason="CuPy sees a CUDA device here")
def test_explicit_cuda_for_kernels_without_cupy_is_refused():
    with pytest.raises(DependencyError, match="cupy cannot use a CUDA device"):
        array_module("cuda")


def test_sparse_on_numpy_is_the_csr_itself():
    rng = np.random.default_rng(0)
    matrix = sp.random(30, 20, density=0.2, format="csr", random_state=rng, dtype=np.float32)
    assert sparse_on(np, matrix) is matrix  # no copy on the host
    coo = matrix.tocoo().astype(np.int64)
    moved = sparse_on(np, coo)
    assert moved.format == "csr" and moved.dtype == np.int64  # numpy keeps the dtype
    np.testing.assert_array_equal(moved.toarray(), coo.toarray())
