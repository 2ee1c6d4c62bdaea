"""Finding and loading libunicache_c, and every C prototype declared on it.

The library is loaded on first use, not at import, so `import unicache`
works on a machine without it; the first call that needs it raises
`LibraryError` listing the places tried. Where it is looked for, in order
(a place named by an environment variable is the only one tried: a wrong
setting is reported, not silently replaced by another library):

1. `UNICACHE_LIBRARY`: the path of the shared library itself;
2. `UNICACHE_BUILD_DIR`: a build tree, holding `c_api/libunicache_c.so`;
3. the build tree of the checkout this package lies in
   (`python/unicache/../../build`), when there is one;
4. the system's loader: `libunicache_c.so.0` (LD_LIBRARY_PATH, the linker's
   cache), then whatever `ctypes.util.find_library("unicache_c")` finds.

Every function is declared with its argument and result types at full
width: ctypes would otherwise pass a Python int as a C int. To add a C
function, add one line to the table of its group below.
"""
from __future__ import annotations

import ctypes as C
import ctypes.util
import os
import threading
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import _abi
from ._version import __version__
from .errors import LibraryError, Unsupported, error_for

LIBRARY_FILE = "libunicache_c.so"
SONAME = "libunicache_c.so.0"

_P, _VP, _SZ, _I32, _U64 = C.POINTER, C.c_void_p, C.c_size_t, C.c_int32, C.c_uint64
_PVP, _PSZ = _P(C.c_void_p), _P(C.c_size_t)
_ENUM = C.c_int  # every C enum is as wide as an int32_t
_SHAPES = (_SZ, _P(_I32), _P(_P(C.c_int64)))  # num_inputs, ndims, shapes

# Functions returning a string (static storage or thread-local: copied at once).
_STRING_FUNCTIONS: Dict[str, List[Any]] = {
    "unicache_last_error": [],
    "unicache_status_name": [_ENUM],
    "unicache_version": [],
}

# Every other function returns unicache_status_t. Each group's table lists
# its functions' parameters in order.
_CORE: Dict[str, List[Any]] = {
    # caches
    "unicache_set_cache_capacity": [_ENUM, _ENUM, _SZ, _ENUM],
    "unicache_get_cache_capacity": [_ENUM, _ENUM, _PSZ, _P(_ENUM)],
    "unicache_set_constant_tensor_cache_capacity": [_ENUM, _SZ],
    "unicache_get_constant_tensor_cache_capacity": [_ENUM, _PSZ],
    "unicache_set_kernel_cache_capacity": [_SZ],
    "unicache_get_kernel_cache_capacity": [_PSZ],
    "unicache_get_cache_stats": [_ENUM, _P(_abi.CacheStatsStruct)],
    "unicache_add_eviction_callback": [_ENUM, C.c_uint32, _abi.EvictionCallback, _VP, _P(_U64)],
    "unicache_remove_eviction_callback": [_ENUM, C.c_uint32, _U64],
    # the store and blobs
    "unicache_store_set_enabled": [C.c_int],
    "unicache_store_set_size_eviction": [C.c_int],
    "unicache_store_set_remote": [C.c_char_p, C.c_char_p],
    "unicache_store_set_directory": [C.c_char_p],
    "unicache_store_set_capacity_mb": [_U64],
    "unicache_store_get_directory": [_VP, _PSZ],
    "unicache_store_get_stats": [_P(_abi.StoreStatsStruct)],
    "unicache_blob_id": [_P(_abi.DeviceIdentityStruct), _VP, _SZ, _VP, _PSZ],
    "unicache_blob_serialize": [_P(_abi.DeviceIdentityStruct), _VP, _SZ, _VP, _SZ, _VP, _PSZ],
    "unicache_blob_deserialize": [_P(_abi.DeviceIdentityStruct), _VP, _SZ, _VP, _PSZ, _VP, _PSZ],
    # graphs and partitions
    "unicache_graph_create": [_PVP],
    "unicache_graph_destroy": [_VP],
    "unicache_graph_add_tensor": [_VP, _I32, _P(C.c_int64), _I32, _P(_abi.LogicalTensorStruct)],
    "unicache_graph_add_op": [_VP, _ENUM, _P(_U64), _SZ, _P(_U64), _SZ, _I32, _I32, _P(_U64)],
    "unicache_graph_set_op_attr_f32": [_VP, _U64, _ENUM, C.c_float],
    "unicache_graph_set_op_attr_i64s": [_VP, _U64, _ENUM, _P(C.c_int64), _SZ],
    "unicache_graph_mark_output": [_VP, _U64],
    "unicache_graph_finalize": [_VP],
    "unicache_engine_get_build_stats": [_VP, _P(_abi.BuildStatsStruct)],
    "unicache_graph_get_partition_count": [_VP, _PSZ],
    "unicache_graph_get_partition": [_VP, _SZ, _PVP],
    "unicache_partition_get_input_count": [_VP, _PSZ],
    "unicache_partition_get_fingerprint": [_VP, _VP, _PSZ],
    "unicache_partition_get_input": [_VP, _SZ, _P(_abi.LogicalTensorStruct)],
    "unicache_partition_get_output_count": [_VP, _PSZ],
    "unicache_partition_get_output": [_VP, _SZ, _P(_abi.LogicalTensorStruct)],
    "unicache_graph_to_json": [_VP, _P(_abi.ShapeRequestStruct), _SZ, _VP, _PSZ],
    "unicache_graph_create_from_json": [C.c_char_p, _SZ, _PVP],
    # engines, streams, compiling, executing
    "unicache_engine_create_cpu": [C.c_int, _PVP],
    "unicache_engine_destroy": [_VP],
    "unicache_engine_get_kind": [_VP, _P(_ENUM)],
    "unicache_stream_create": [_VP, _PVP],
    "unicache_stream_destroy": [_VP],
    "unicache_stream_wait": [_VP],
    "unicache_compile": [_VP, *_SHAPES, _VP, _PVP],
    "unicache_compiled_partition_destroy": [_VP],
    "unicache_compiled_partition_get_output": [_VP, _SZ, _P(_abi.LogicalTensorStruct)],
    "unicache_compiled_partition_execute": [_VP, _VP, _P(_abi.TensorStruct), _SZ, _P(_abi.TensorStruct), _SZ],
    "unicache_get_cache_blob_id": [_VP, *_SHAPES, _VP, _VP, _PSZ],
    "unicache_compiled_partition_get_cache_blob_id": [_VP, _VP, _PSZ],
    "unicache_compiled_partition_get_cache_blob": [_VP, _VP, _PSZ],
    "unicache_compile_from_cache_blob": [_VP, *_SHAPES, _VP, _VP, _SZ, _PVP],
}

# Present only in builds with the OpenCL backend (cl_device_id, cl_context,
# cl_command_queue and cl_mem are pointers).
_OPENCL: Dict[str, List[Any]] = {
    "unicache_opencl_engine_create_default": [_PVP],
    "unicache_opencl_engine_create": [_VP, _VP, _PVP],
    "unicache_opencl_engine_get_cache_blob_id": [_VP, _VP, _PSZ],
    "unicache_opencl_engine_get_cache_blob": [_VP, _VP, _PSZ],
    "unicache_opencl_engine_create_from_cache_blob": [_VP, _VP, _VP, _SZ, _PVP],
    "unicache_opencl_engine_get_device": [_VP, _PVP],
    "unicache_opencl_engine_get_context": [_VP, _PVP],
    "unicache_opencl_stream_get_queue": [_VP, _PVP],
    "unicache_opencl_buffer_create": [_VP, _SZ, _VP, _PVP],
    "unicache_opencl_buffer_release": [_VP],
    "unicache_opencl_buffer_read": [_VP, _VP, _VP, _SZ],
    "unicache_opencl_buffer_write": [_VP, _VP, _VP, _SZ],
}

# Present only in builds with the CUDA backend (CUcontext and CUstream are
# pointers, CUdeviceptr an unsigned long long).
_CU_PTR = C.c_ulonglong
_CUDA: Dict[str, List[Any]] = {
    "unicache_cuda_available": [_P(C.c_int), _VP, _PSZ],
    "unicache_cuda_engine_create_default": [_PVP],
    "unicache_cuda_engine_create": [C.c_int, _PVP],
    "unicache_cuda_engine_create_in_context": [_VP, _PVP],
    "unicache_cuda_release_cached": [_VP],
    "unicache_cuda_stream_create": [_VP, _VP, _PVP],
    "unicache_cuda_stream_create_with_flags": [_VP, _VP, C.c_uint32, _PVP],
    "unicache_cuda_engine_get_cache_blob_id": [C.c_int, _VP, _PSZ],
    "unicache_cuda_engine_get_cache_blob": [_VP, _VP, _PSZ],
    "unicache_cuda_engine_create_from_cache_blob": [C.c_int, _VP, _SZ, _PVP],
    "unicache_cuda_engine_get_context": [_VP, _PVP],
    "unicache_cuda_stream_get_stream": [_VP, _PVP],
    "unicache_cuda_buffer_create": [_VP, _SZ, _VP, _P(_CU_PTR)],
    "unicache_cuda_buffer_free": [_VP, _CU_PTR],
    "unicache_cuda_buffer_read": [_VP, _CU_PTR, _VP, _SZ],
    "unicache_cuda_buffer_write": [_VP, _CU_PTR, _VP, _SZ],
}

# A group missing from the library: what to tell a caller who needs it.
_OPTIONAL = {"OpenCL": _OPENCL, "CUDA": _CUDA}


class _Library:
    def __init__(self, cdll: C.CDLL, path: str) -> None:
        self.cdll, self.path = cdll, path
        self.missing: Dict[str, str] = {}  # optional function -> its backend
        for name, argtypes in _STRING_FUNCTIONS.items():
            _declare(cdll, name, argtypes, C.c_char_p, path)
        for name, argtypes in _CORE.items():
            _declare(cdll, name, argtypes, C.c_int, path)
        for backend, table in _OPTIONAL.items():
            for name, argtypes in table.items():
                if hasattr(cdll, name):
                    _declare(cdll, name, argtypes, C.c_int, path)
                else:
                    self.missing[name] = backend


def _declare(cdll: C.CDLL, name: str, argtypes: List[Any], restype: Any, path: str) -> None:
    try:
        function = getattr(cdll, name)
    except AttributeError:
        raise LibraryError(f"{path} has no {name}: it is not a libunicache_c this package ({__version__}) "
                           f"can use") from None
    function.argtypes, function.restype = argtypes, restype


_lock = threading.Lock()
_loaded: Optional[_Library] = None


def library() -> _Library:
    """The loaded library (loaded on the first call). Raises LibraryError."""
    global _loaded
    if _loaded is None:
        with _lock:
            if _loaded is None:
                _loaded = _check_version(_find_and_load())
    return _loaded


def _find_and_load() -> _Library:
    tried: List[str] = []
    by_env = os.environ.get("UNICACHE_LIBRARY")
    build_dir = os.environ.get("UNICACHE_BUILD_DIR")
    if by_env:
        named: Optional[Path] = Path(by_env)
        where = "UNICACHE_LIBRARY"
    elif build_dir:
        named, where = Path(build_dir) / "c_api" / LIBRARY_FILE, "UNICACHE_BUILD_DIR"
    else:
        named = None
    if named is not None:  # the only place tried
        lib = _load_file(named, where, tried)
        if lib is None:
            raise _not_found(tried)
        return lib
    python_dir = Path(__file__).resolve().parents[1]
    if (python_dir / "pyproject.toml").is_file():  # running from a checkout, not an installed copy
        checkout = python_dir.parent / "build" / "c_api" / LIBRARY_FILE
        lib = _load_file(checkout, "the checkout's build tree", tried)
        if lib is not None:
            return lib
    names = [SONAME] + [n for n in [ctypes.util.find_library("unicache_c")] if n and n != SONAME]
    for name in names:
        try:
            return _Library(C.CDLL(name), name)
        except OSError as e:
            tried.append(f"the system loader, {name}: {e}")
    raise _not_found(tried)


def _load_file(path: Path, where: str, tried: List[str]) -> Optional[_Library]:
    """The library at `path`; None if there is no file there (noted in `tried`)."""
    if not path.is_file():
        tried.append(f"{where}: {path}: no such file")
        return None
    try:
        return _Library(C.CDLL(str(path)), str(path))
    except OSError as e:  # present but not loadable: report it, never load another one instead
        raise LibraryError(f"{where}: cannot load {path}: {e}") from None


def _not_found(tried: Sequence[str]) -> LibraryError:
    return LibraryError("libunicache_c not found; tried " + "; ".join(tried) +
                        ". Build the project (target unicache_c), or set UNICACHE_BUILD_DIR to its build tree "
                        "or UNICACHE_LIBRARY to the library.")


def _check_version(lib: _Library) -> _Library:
    version = lib.cdll.unicache_version().decode()
    if version.split(".")[:2] != __version__.split(".")[:2]:
        raise LibraryError(f"{lib.path} is unicache {version}; this package ({__version__}) needs "
                           f"{'.'.join(__version__.split('.')[:2])}.x")
    return lib


def function(name: str) -> Any:
    """The C function `name`; Unsupported if the library was built without its backend."""
    lib = library()
    if name in lib.missing:
        raise Unsupported(f"this build of libunicache_c ({lib.path}) has no {lib.missing[name]} backend",
                          what=name)
    return getattr(lib.cdll, name)


def has(name: str) -> bool:
    return name not in library().missing


def last_error() -> str:
    return library().cdll.unicache_last_error().decode(errors="replace")


def check(status: int, what: str) -> None:
    """Raises the status's Error, with this thread's last message from the library."""
    if status != 0:
        raise error_for(status, last_error(), what)


def call(name: str, *args: Any, what: str = "") -> None:
    """Calls `name` and raises the status's Error, with the library's message, on failure."""
    check(function(name)(*args), what or name)


def query_bytes(name: str, *args: Any, what: str = "", expected: int = 0) -> bytes:
    """A size-query call (data NULL asks the size, then a buffer is filled): its bytes.
    With `expected` > 0 a buffer of that size is tried first (one call where it fits)."""
    size = C.c_size_t(expected)
    if expected <= 0:
        call(name, *args, None, C.byref(size), what=what)
    while True:
        buffer = (C.c_char * max(size.value, 1))()
        status = function(name)(*args, buffer, C.byref(size))
        if status == 3 and len(buffer) < size.value:  # BUFFER_TOO_SMALL: grew since the query
            continue
        check(status, what or name)
        return buffer.raw[:size.value]


def query_string(name: str, *args: Any, what: str = "", expected: int = 0) -> str:
    return query_bytes(name, *args, what=what, expected=expected).rstrip(b"\0").decode(errors="replace")


def shape_arrays(shapes: Sequence[Sequence[int]]) -> Tuple[Any, Any, Any]:
    """The (ndims, shapes) arrays of unicache_compile and friends, and what keeps them alive."""
    rows = [(C.c_int64 * max(len(s), 1))(*s) for s in shapes]
    ndims = (C.c_int32 * max(len(shapes), 1))(*[len(s) for s in shapes])
    pointers = (_P(C.c_int64) * max(len(shapes), 1))(*[C.cast(r, _P(C.c_int64)) for r in rows])
    return ndims, pointers, rows
