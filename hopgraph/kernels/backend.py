"""Array-module selection: every kernel is written once against ``xp`` (numpy or cupy)."""

from __future__ import annotations

from types import ModuleType
from typing import Any, Literal

import numpy as np

from hopgraph.errors import DependencyError

Device = Literal["auto", "cpu", "cuda"]


def cupy_available() -> bool:
    """True only where CuPy imports *and* a CUDA device answers."""
    try:
        import cupy  # noqa: PLC0415

        return bool(cupy.is_available())
    except Exception:  # ImportError, or a driver error raised at import on CPU machines
        return False


def array_module(device: Device = "auto") -> ModuleType:
    """Return ``numpy`` or ``cupy`` for the requested device."""
    if device == "cpu":
        return np
    if device == "cuda":
        if not cupy_available():
            raise DependencyError(
                "device 'cuda' was requested but no CUDA device is usable here "
                "(install the 'gpu' extra on a GPU machine, or use --device cpu)"
            )
        import cupy  # noqa: PLC0415

        return cupy
    return array_module("cuda") if cupy_available() else np


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


def to_numpy(array: Any) -> np.ndarray:
    """Bring an array (numpy or cupy) to host memory as numpy."""
    if module_of(array) is np:
        return np.asarray(array)
    return array.get()
