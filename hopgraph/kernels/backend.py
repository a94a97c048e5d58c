"""Array-module selection: every kernel is written once against ``xp`` (numpy or cupy).

``device`` has one meaning everywhere (models, kernels, FAISS): ``cpu`` and ``cuda`` are taken as
asked, and ``auto`` is ``cuda`` only where the library that will run the work can use a CUDA
device (CuPy for the array kernels, torch for the models), else ``cpu``. :func:`resolve_device`
is that rule; both :func:`array_module` and the model loaders call it.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any, Literal

import numpy as np

from hopgraph.errors import DependencyError

Device = Literal["auto", "cpu", "cuda"]
Runtime = Literal["cupy", "torch"]


@functools.cache
def cupy_available() -> bool:
    """True only where CuPy imports *and* a CUDA device answers (asked once per process: devices stay)."""
    try:
        import cupy  # noqa: PLC0415

        return bool(cupy.is_available())
    except Exception:  # ImportError, or a driver error raised at import on CPU machines
        return False


@functools.cache
def torch_cuda_available() -> bool:
    """True only where torch imports and sees a CUDA device (asked once per process)."""
    try:
        import torch  # noqa: PLC0415

        return bool(torch.cuda.is_available())
    except Exception:  # ImportError, or a broken CUDA install
        return False


RUNTIMES = {"cupy": cupy_available, "torch": torch_cuda_available}


def resolve_device(device: str, runtime: Runtime = "cupy") -> Literal["cpu", "cuda"]:
    """``cpu`` or ``cuda`` for a configured device, for work that ``runtime`` (cupy or torch) runs.

    ``auto`` becomes ``cuda`` only when ``runtime`` can use a CUDA device. An explicit ``cuda`` on
    a machine where ``runtime`` cannot use one is refused here, with the fix, instead of failing
    later inside the library.
    """
    if device == "cpu":
        return "cpu"
    usable = RUNTIMES[runtime]()
    if device == "cuda":
        if not usable:
            extra = "gpu" if runtime == "cupy" else "torch built with CUDA"
            raise DependencyError(
                f"device 'cuda' was requested but {runtime} cannot use a CUDA device here "
                f"(install {extra!r} on a GPU machine, or set embedding.device=cpu)"
            )
        return "cuda"
    if device != "auto":
        raise ValueError(f"device must be auto, cpu or cuda, got {device!r}")
    return "cuda" if usable else "cpu"


def array_module(device: str = "auto") -> ModuleType:
    """Return ``numpy`` or ``cupy`` for the requested device (see :func:`resolve_device`)."""
    if resolve_device(device, "cupy") == "cpu":
        return np
    import cupy  # noqa: PLC0415

    return cupy


def module_of(array: Any) -> ModuleType:
    """The array module an array belongs to (numpy for anything that is not a CuPy array)."""
    if type(array).__module__.startswith("cupy"):
        import cupy  # noqa: PLC0415

        return cupy
    return np


def sparse_module(xp: ModuleType) -> ModuleType:
    """scipy.sparse for numpy, cupyx.scipy.sparse for cupy."""
    if xp is np:
        import scipy.sparse  # noqa: PLC0415

        return scipy.sparse
    import cupyx.scipy.sparse  # noqa: PLC0415

    return cupyx.scipy.sparse


def sparse_on(xp: ModuleType, matrix: Any) -> Any:
    """``matrix`` (scipy sparse) as a CSR matrix of ``xp``: unchanged data on numpy, a device copy on cupy.

    The one place a graph crosses to the device. cupyx holds float32/float64 (and bool/complex)
    data only, so any other dtype travels as float64, which holds every count exactly.
    """
    matrix = matrix if getattr(matrix, "format", None) == "csr" else matrix.tocsr()
    if xp is np:
        return matrix
    if matrix.dtype not in (np.float32, np.float64):
        matrix = matrix.astype(np.float64)
    return sparse_module(xp).csr_matrix(matrix)


def to_numpy(array: Any) -> np.ndarray:
    """Bring an array (numpy or cupy) to host memory as numpy."""
    if module_of(array) is np:
        return np.asarray(array)
    return array.get()
