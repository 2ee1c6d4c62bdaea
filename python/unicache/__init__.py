"""unicache from Python: graphs compiled once per shape, kernels and weights cached.

A pure-Python package over the C interface (libunicache_c, through ctypes):
one copy serves every CPython 3.9+, nothing compiled against it.

    import numpy as np
    import unicache
    from unicache import OpKind

    g = unicache.Graph()
    x, w = g.add_tensor([-1, 64]), g.add_tensor([64, 32], constant=True)
    y = g.add_tensor([-1, 32])
    g.add_op(OpKind.MATMUL, [x, w], [y])
    g.finalize()
    part = g.partitions[0]
    engine = unicache.Engine.cpu()
    stream = engine.stream()
    weights = np.ones((64, 32), np.float32)
    for m in (1, 7, 33):                                  # each new shape compiles once
        cp = part.compile([(m, 64), weights.shape], engine)
        (out,) = cp.execute(stream, [np.ones((m, 64), np.float32), weights])

Finding the library. It is loaded on first use (`import unicache` works
without it), from the first of:

1. `UNICACHE_LIBRARY`: the path of libunicache_c.so itself;
2. `UNICACHE_BUILD_DIR`: a build tree (its `c_api/libunicache_c.so`);
3. the build tree of the checkout this package is in (`<checkout>/build`);
4. the system's loader (`libunicache_c.so.0`, then `find_library("unicache_c")`).

A place an environment variable names is the only one tried. When none has
the library, `LibraryError` (a `unicache.Error` and an `ImportError`) lists
the places tried; a library of another major.minor version is refused too.

Objects and ownership. Graph, Engine, Stream, CompiledPartition and the
device buffers own a C handle: close() (or `with`) releases it, and __del__
does if neither did. A partition keeps its graph alive, a stream, compiled
partition or buffer its engine. A closed object raises InvalidHandle when
used. Engines and compiled partitions may be used from any thread (execute()
concurrently, each thread with its own stream); a graph is built by one
thread; a stream is used by one thread at a time.

Errors. Every exception derives from `unicache.Error`, with `.status` (a
`Status`) and `.message` (the library's). numpy is optional: needed only to
allocate outputs (execute without outputs) and for `DeviceBuffer.to_numpy`;
torch is optional and never imported unless a torch tensor is passed in.
"""
from __future__ import annotations

from . import store
from ._version import __version__
from .buffers import CudaBuffer, DeviceBuffer, OpenCLBuffer
from .caches import (Cache, CacheStats, Capacity, EvictionEvent, EvictionSubscription, Owner, Policy,
                     add_eviction_callback, cache_stats, get_cache_capacity, get_constant_tensor_cache_capacity,
                     get_kernel_cache_capacity, set_cache_capacity, set_constant_tensor_cache_capacity,
                     set_kernel_cache_capacity)
from .compiled import CompiledPartition
from .engine import Backend, BuildStats, Engine, EngineKind, Stream, cuda_available
from .errors import (BufferTooSmall, CacheError, CompileFailed, Error, ExecuteFailed, InvalidArgument, InvalidGraph,
                     InvalidHandle, InvalidTensorType, LibraryError, OutOfMemory, Status, StoreError, Unsupported)
from .graph import UNKNOWN_DIM, AttentionLayout, Graph, LogicalTensor, OpAttr, OpKind, Partition
from .tensors import Tensor


def library_version() -> str:
    """The loaded libunicache_c's version (loading it; LibraryError if it cannot be)."""
    from . import _lib
    return _lib.library().cdll.unicache_version().decode()


def library_path() -> str:
    """Where the loaded libunicache_c came from (a path, or the name the loader found)."""
    from . import _lib
    return _lib.library().path


__all__ = [
    "__version__", "library_version", "library_path", "store",
    "Graph", "Partition", "LogicalTensor", "OpKind", "OpAttr", "AttentionLayout", "UNKNOWN_DIM",
    "Engine", "EngineKind", "Backend", "BuildStats", "Stream", "cuda_available",
    "CompiledPartition", "Tensor", "DeviceBuffer", "OpenCLBuffer", "CudaBuffer",
    "Cache", "Policy", "Owner", "CacheStats", "Capacity", "EvictionEvent", "EvictionSubscription",
    "set_cache_capacity", "get_cache_capacity", "set_constant_tensor_cache_capacity",
    "get_constant_tensor_cache_capacity", "set_kernel_cache_capacity", "get_kernel_cache_capacity", "cache_stats",
    "add_eviction_callback",
    "Error", "Status", "InvalidArgument", "InvalidTensorType", "InvalidHandle", "BufferTooSmall", "InvalidGraph",
    "CompileFailed", "ExecuteFailed", "CacheError", "StoreError", "Unsupported", "OutOfMemory", "LibraryError",
]
