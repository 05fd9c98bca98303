"""The package's compiled libraries (encode/render.c, model/passes.c), built by the install
(scripts/hatch_build.py) beside their sources and called through ctypes over numpy buffers: no
Python C API, nothing more to install. Each is optional: where it is absent, numpy computes the
same."""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path


def load(path: Path, abi_function: str, abi: int) -> ctypes.CDLL | None:
    """The library built at `path`; None where there is none, it does not load, it was built
    from another version of its source (its `abi_function()` says which functions and arguments
    it has) or the machine is not little-endian (the libraries read numpy's little-endian values
    as they lie in memory)."""
    if sys.byteorder != "little":
        return None
    try:
        library = ctypes.CDLL(str(path))
        return library if getattr(library, abi_function)() == abi else None
    except (OSError, AttributeError):
        return None
