"""Device memory for callers without OpenCL or CUDA bindings of their own.

    buf = unicache.OpenCLBuffer(engine, array)        # a copy of a host array
    out = unicache.OpenCLBuffer(engine, nbytes=4 * m * n)
    ...execute...
    result = out.to_numpy(stream, (m, n))              # blocking, after the stream's work

A buffer keeps its engine alive and is released by close() (or `with`, or
when collected). Copies run on a stream, after the work enqueued on it, and
return when done. A buffer may be used from any thread, but is not to be
closed while another thread uses it; on CUDA, close it only after wait() has
returned on every stream whose work used it.
"""
from __future__ import annotations

import ctypes as C
from typing import Any, Optional, Sequence

from . import _host, _lib
from ._handle import NativeHandle, Resource
from .engine import Backend, Engine, Stream
from .errors import InvalidArgument, InvalidTensorType


class DeviceBuffer(Resource):
    """Memory of an engine's device: `nbytes` bytes at `pointer` (a cl_mem or CUdeviceptr)."""

    backend: Backend
    _create: str
    _release: str
    _read: str
    _write: str
    _pointer_type: Any = C.c_void_p

    def __init__(self, engine: Engine, data: Any = None, nbytes: Optional[int] = None) -> None:
        if engine.backend != self.backend:
            raise InvalidArgument(f"a {type(self).__name__} belongs to a {self.backend.value} engine, "
                                  f"not a {engine.backend.value} one")
        source = _host.host_memory(data, "data", writable=False) if data is not None else None
        size = source.nbytes if source is not None else nbytes
        if size is None or (nbytes is not None and nbytes != size):
            raise InvalidArgument(f"{type(self).__name__}: give data or nbytes (or both, equal)")
        handle = self._pointer_type()
        with engine._handle() as e:
            _lib.call(self._create, e, size, source.pointer if source else None, C.byref(handle))
        pointer = handle.value or 0
        self._own(NativeHandle(pointer, self._destroyer(engine), self.backend.value + " buffer"),
                  depends_on=[engine])
        self.engine, self.nbytes = engine, size

    def _destroyer(self, engine: Engine) -> Any:
        raise NotImplementedError

    @property
    def pointer(self) -> int:
        """The cl_mem or CUdeviceptr, as an int (borrowed: valid until close())."""
        return self._handle().pointer

    def _check(self, stream: Stream, host: _host.View, what: str) -> None:
        if stream.engine.backend != self.backend:
            raise InvalidArgument(f"{what}: a {stream.engine.backend.value} stream for a {self.backend.value} buffer")
        if host.nbytes is None or host.nbytes > self.nbytes:
            raise InvalidArgument(f"{what}: {host.nbytes} bytes, the buffer holds {self.nbytes}")

    def write(self, stream: Stream, data: Any) -> None:
        """Copies a host array (float32, contiguous, at most nbytes) into the buffer."""
        host = _host.host_memory(data, "write", writable=False)
        self._check(stream, host, "write")
        with self._handle() as b, stream._handle() as s:
            _lib.call(self._write, s, b, host.pointer, host.nbytes)

    def read_into(self, stream: Stream, out: Any) -> Any:
        """Copies the buffer's first bytes into a writable host array (float32,
        contiguous, at most nbytes) and returns it."""
        host = _host.host_memory(out, "read_into", writable=True)
        self._check(stream, host, "read_into")
        with self._handle() as b, stream._handle() as s:
            _lib.call(self._read, s, b, host.pointer, host.nbytes)
        return out

    def to_numpy(self, stream: Stream, shape: Optional[Sequence[int]] = None) -> Any:
        """A new float32 numpy array of `shape` (default: all of the buffer, flat) read from
        the buffer. Needs numpy."""
        try:
            import numpy
        except ImportError:
            raise InvalidTensorType("to_numpy needs numpy; use read_into with a host array") from None
        out = numpy.empty(shape if shape is not None else (self.nbytes // _host.FLOAT_BYTES,), numpy.float32)
        return self.read_into(stream, out)

    def __repr__(self) -> str:
        return f"<unicache.{type(self).__name__} {self.nbytes} bytes{' closed' if self.closed else ''}>"


class OpenCLBuffer(DeviceBuffer):
    """A cl_mem in an OpenCL engine's context, owned by this object.

    OpenCLBuffer(engine, data=host_array) copies the array in;
    OpenCLBuffer(engine, nbytes=n) leaves it uninitialised.
    """

    backend = Backend.OPENCL
    _create, _release = "unicache_opencl_buffer_create", "unicache_opencl_buffer_release"
    _read, _write = "unicache_opencl_buffer_read", "unicache_opencl_buffer_write"

    def _destroyer(self, engine: Engine) -> Any:
        return _lib.function(self._release)


class CudaBuffer(DeviceBuffer):
    """Device memory (a CUdeviceptr) of a CUDA engine, owned by this object.

    CudaBuffer(engine, data=host_array) copies the array in;
    CudaBuffer(engine, nbytes=n) leaves it uninitialised.
    """

    backend = Backend.CUDA
    _create, _release = "unicache_cuda_buffer_create", "unicache_cuda_buffer_free"
    _read, _write = "unicache_cuda_buffer_read", "unicache_cuda_buffer_write"
    _pointer_type = C.c_ulonglong

    def _destroyer(self, engine: Engine) -> Any:
        free = _lib.function(self._release)
        native = engine._handle()  # kept alive by the buffer (depends_on) until the free ran
        return lambda pointer: free(native.pointer, pointer)
