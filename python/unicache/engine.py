"""Engines (a device of a backend: CPU, OpenCL, CUDA) and their streams.

    cpu = unicache.Engine.cpu()
    gpu = unicache.Engine.opencl_default()         # or Engine.cuda(0)
    stream = cpu.stream()

Engines may be used from any thread; a stream by one thread at a time. An
engine's OpenCL and CUDA handles stay the caller's where the caller passed
them in (as ints: a cl_device_id, cl_context, CUcontext or CUstream value).
"""
from __future__ import annotations

import ctypes as C
import enum
import operator
from dataclasses import dataclass
from typing import Any, Optional, Tuple

from . import _abi, _lib
from ._handle import NativeHandle, Resource
from .errors import InvalidArgument, InvalidTensorType


class EngineKind(enum.IntEnum):
    """`unicache_engine_kind_t`: the kind a capacity is set for."""

    CPU = 0
    GPU = 1


class Backend(str, enum.Enum):
    """Which backend an engine runs on; decides what memory its tensors are."""

    CPU = "cpu"  # host memory: numpy arrays, torch CPU tensors
    OPENCL = "opencl"  # cl_mem: OpenCLBuffer
    CUDA = "cuda"  # CUdeviceptr: CudaBuffer, torch CUDA tensors, __cuda_array_interface__


def _pointer(value: Any, what: str) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise InvalidArgument(f"{what}: expected a handle as an int, got {value!r}") from None


@dataclass(frozen=True)
class BuildStats:
    """What Engine.build_stats() returns: kernels built, loaded from binaries, and
    the nanoseconds spent building."""

    built: int
    loaded: int
    build_ns: int


class Engine(Resource):
    """A device and context of a backend. Make one with a class method.

    Thread-safe. close() ends its use; streams, compiled partitions and buffers
    made from it keep the C engine alive until they are closed.
    """

    def __init__(self, pointer: int, backend: Backend, device_index: Optional[int] = None) -> None:
        """Internal: use the class methods."""
        self._own(NativeHandle(pointer, _lib.function("unicache_engine_destroy"), "engine"))
        self.backend, self.device_index = backend, device_index

    @classmethod
    def _create(cls, function: str, *args: Any, backend: Backend, device_index: Optional[int] = None) -> "Engine":
        handle = C.c_void_p()
        _lib.call(function, *args, C.byref(handle))
        return cls(handle.value or 0, backend, device_index)

    @classmethod
    def cpu(cls, index: int = 0) -> "Engine":
        """The CPU engine (oneDNN); Unsupported if the library was built without it."""
        return cls._create("unicache_engine_create_cpu", index, backend=Backend.CPU, device_index=index)

    @classmethod
    def opencl_default(cls) -> "Engine":
        """The default OpenCL device (UNICACHE_OPENCL_DEVICE, else the first GPU, else the
        first device, e.g. PoCL) in a context of its own. Unsupported without the backend;
        Error (with the driver's message) if there is no device."""
        return cls._create("unicache_opencl_engine_create_default", backend=Backend.OPENCL)

    @classmethod
    def opencl(cls, device: int, context: int, cache_blob: Optional[bytes] = None) -> "Engine":
        """An engine over the caller's cl_device_id and cl_context (retained, not taken);
        from an engine cache blob (cache_blob()) without probing the device if given."""
        dev, ctx = _pointer(device, "device"), _pointer(context, "context")
        if cache_blob is None:
            return cls._create("unicache_opencl_engine_create", dev, ctx, backend=Backend.OPENCL)
        return cls._create("unicache_opencl_engine_create_from_cache_blob", dev, ctx, cache_blob, len(cache_blob),
                           backend=Backend.OPENCL)

    @classmethod
    def cuda(cls, ordinal: Optional[int] = None, cache_blob: Optional[bytes] = None) -> "Engine":
        """Device `ordinal` in its primary context (the one PyTorch uses); None: the device
        UNICACHE_CUDA_DEVICE names, else 0. Unsupported with the reason when CUDA is not there."""
        if ordinal is None:
            return cls._create("unicache_cuda_engine_create_default", backend=Backend.CUDA)
        if cache_blob is not None:
            return cls._create("unicache_cuda_engine_create_from_cache_blob", ordinal, cache_blob, len(cache_blob),
                               backend=Backend.CUDA, device_index=ordinal)
        return cls._create("unicache_cuda_engine_create", ordinal, backend=Backend.CUDA, device_index=ordinal)

    @classmethod
    def cuda_in_context(cls, context: int) -> "Engine":
        """An engine in the caller's CUcontext, which must outlive it: call
        release_cached() before destroying that context."""
        return cls._create("unicache_cuda_engine_create_in_context", _pointer(context, "context"),
                           backend=Backend.CUDA)

    @classmethod
    def for_torch_device(cls, device: Any) -> "Engine":
        """The engine of a torch device ("cpu", "cuda:1", a torch.device): the CPU
        engine, or the CUDA device's primary context (shared with PyTorch)."""
        import torch  # only callers with torch get here
        dev = torch.device(device)
        if dev.type == "cpu":
            return cls.cpu()
        if dev.type == "cuda":
            return cls.cuda(dev.index if dev.index is not None else torch.cuda.current_device())
        raise InvalidTensorType(f"torch device {dev}: unicache runs on 'cpu' and 'cuda' devices")

    @property
    def kind(self) -> EngineKind:
        kind = C.c_int()
        with self._handle() as e:
            _lib.call("unicache_engine_get_kind", e, C.byref(kind))
        return EngineKind(kind.value)

    def build_stats(self) -> "BuildStats":
        """Kernels this engine's backend built since the process started (every device
        of the backend): on the CPU oneDNN primitives created, on a GPU kernels built
        from source (`loaded`: from stored or preloaded binaries)."""
        out = _abi.BuildStatsStruct()
        with self._handle() as e:
            _lib.call("unicache_engine_get_build_stats", e, C.byref(out))
        return BuildStats(out.built, out.loaded, out.build_ns)

    def stream(self, cuda_stream: Any = None, versioned_constants: bool = False) -> "Stream":
        """A new stream of this engine. On CUDA, `cuda_stream` makes it over the caller's
        CUstream (an int, 0 for the legacy default stream, or an object with a
        `cuda_stream` int such as torch.cuda.Stream); None: a stream of the library's.
        `versioned_constants` (over a caller's CUDA stream): the caller promises that a
        constant input changes only with a version bump and stays alive while in use
        (torch's parameters and their _version), so no execution reads it back to
        check it, which on the caller's stream would wait for its queued work."""
        return Stream(self, cuda_stream, versioned_constants)

    def cache_blob(self) -> bytes:
        """The engine cache blob (OpenCL and CUDA engines): create the next engine of this
        device from it without probing the device."""
        name = {Backend.OPENCL: "unicache_opencl_engine_get_cache_blob",
                Backend.CUDA: "unicache_cuda_engine_get_cache_blob"}.get(self.backend)
        if name is None:
            raise InvalidArgument(f"a {self.backend.value} engine has no engine cache blob")
        with self._handle() as e:
            return _lib.query_bytes(name, e)

    def native_handles(self) -> Tuple[int, ...]:
        """OpenCL: (cl_device_id, cl_context); CUDA: (CUcontext,); CPU: (). Ints, borrowed."""
        names = {Backend.OPENCL: ("unicache_opencl_engine_get_device", "unicache_opencl_engine_get_context"),
                 Backend.CUDA: ("unicache_cuda_engine_get_context",)}.get(self.backend, ())
        out = []
        with self._handle() as e:
            for name in names:
                value = C.c_void_p()
                _lib.call(name, e, C.byref(value))
                out.append(value.value or 0)
        return tuple(out)

    def release_cached(self) -> None:
        """CUDA: frees every kernel and weight cached for this engine's context, after the
        work that used them; call it before destroying a context of your own."""
        with self._handle() as e:
            _lib.call("unicache_cuda_release_cached", e)

    def __repr__(self) -> str:
        device = f" {self.device_index}" if self.device_index is not None else ""
        return f"<unicache.Engine {self.backend.value}{device}{' closed' if self.closed else ''}>"


class Stream(Resource):
    """An execution queue of an engine, which it keeps alive. One thread at a time.

    On a GPU, execute() enqueues and returns: wait() is where the host waits,
    once per request, before reading outputs or changing or freeing inputs.
    """

    def __init__(self, engine: Engine, cuda_stream: Any = None, versioned_constants: bool = False) -> None:
        handle = C.c_void_p()
        if versioned_constants and cuda_stream is None:
            raise InvalidArgument("versioned_constants: for a stream over a caller's CUDA stream")
        with engine._handle() as e:
            if cuda_stream is None:
                _lib.call("unicache_stream_create", e, C.byref(handle))
            else:
                raw = getattr(cuda_stream, "cuda_stream", cuda_stream)
                _lib.call("unicache_cuda_stream_create_with_flags", e, _pointer(raw, "cuda_stream"),
                          1 if versioned_constants else 0, C.byref(handle))
        self._own(NativeHandle(handle.value or 0, _lib.function("unicache_stream_destroy"), "stream"),
                  depends_on=[engine])
        self.engine = engine

    def wait(self) -> None:
        """Waits for the work enqueued on the stream; ExecuteFailed if some of it failed."""
        with self._handle() as s:
            _lib.call("unicache_stream_wait", s, what="wait")

    def native_handle(self) -> int:
        """The OpenCL cl_command_queue or CUDA CUstream (borrowed, as an int); 0 on the CPU."""
        name = {Backend.OPENCL: "unicache_opencl_stream_get_queue",
                Backend.CUDA: "unicache_cuda_stream_get_stream"}.get(self.engine.backend)
        if name is None:
            return 0
        value = C.c_void_p()
        with self._handle() as s:
            _lib.call(name, s, C.byref(value))
        return value.value or 0


def cuda_available() -> Tuple[bool, str]:
    """Whether a CUDA driver and device are there; if not, why (also for a build
    without the CUDA backend)."""
    if not _lib.has("unicache_cuda_available"):
        return False, "this build of libunicache_c has no CUDA backend"
    available = C.c_int()
    reason = _lib.query_string("unicache_cuda_available", C.byref(available))
    return bool(available.value), reason
