"""Tensors for execute(): the caller's memory, passed to the library without a copy.

execute() takes, for each input and output, any of:

- on a CPU engine: a numpy array, a torch CPU tensor, any object with
  `__array_interface__` or `__dlpack__` (CPU), a writable float buffer
  (array.array('f'));
- on an OpenCL engine: an `OpenCLBuffer`;
- on a CUDA engine: a `CudaBuffer`, a torch CUDA tensor, any object with
  `__cuda_array_interface__` or `__dlpack__` (CUDA);
- on any engine: a pointer as an int (a host address, a cl_mem, a
  CUdeviceptr) that the caller vouches for: nothing about it is checked;
- any of these wrapped in `Tensor(data, version=n)` to give a version.

Arrays must be float32, C-contiguous, of exactly the compiled shape, on the
engine's kind of memory; outputs must be writable. Each check failing raises
InvalidTensorType (a TypeError: dtype, device, kind of object) or
InvalidArgument (a ValueError: layout, shape, size), naming the input or
output by its index. The caller keeps inputs alive and unchanged, and
outputs unread, until the stream's wait() on a GPU (on the CPU execute()
returns finished).
"""
from __future__ import annotations

import operator
from typing import Any, Tuple

from . import _host
from .buffers import DeviceBuffer
from .engine import Backend
from .errors import InvalidArgument, InvalidTensorType
from .logical_tensor import LogicalTensor


class Tensor:
    """An input or output with a version: `Tensor(weights, version=2)`.

    `version` matters for constants: their packed copies are found by address,
    size and a sampled fingerprint of their contents; bump the version whenever
    a constant's contents change in place, so that it is packed again (the
    sampled check can miss an edit, and UNICACHE_CONSTANT_CHECK=none trusts
    address and version alone). Unwrapped data has version 0.
    """

    __slots__ = ("data", "version")

    def __init__(self, data: Any, version: int = 0) -> None:
        if isinstance(data, Tensor):
            raise InvalidArgument("Tensor(data): data is already a Tensor")
        self.data, self.version = data, operator.index(version)
        if not 0 <= self.version < 2 ** 64:
            raise InvalidArgument(f"Tensor version {version}: expected 0 <= version < 2**64")

    def __repr__(self) -> str:
        return f"unicache.Tensor({type(self.data).__name__}, version={self.version})"


_MEMORY_OF = {Backend.CPU: _host.HOST, Backend.OPENCL: _host.OPENCL, Backend.CUDA: _host.CUDA}
_TAKES = {
    Backend.CPU: "host memory (a numpy array, a torch CPU tensor)",
    Backend.OPENCL: "an OpenCLBuffer (or a cl_mem as an int)",
    Backend.CUDA: "CUDA memory (a CudaBuffer, a torch CUDA tensor, __cuda_array_interface__)",
}


def _view(data: Any, where: str) -> _host.View:
    if isinstance(data, DeviceBuffer):
        memory = _host.OPENCL if data.backend == Backend.OPENCL else _host.CUDA
        return _host.View(data.pointer, memory, None, data.nbytes, keep=data)
    if isinstance(data, int) and not isinstance(data, bool):
        if data < 0:
            raise InvalidArgument(f"{where}: a pointer must not be negative, got {data}")
        return _host.View(data, _host.ANY, None, None)
    return _host.view(data, where)


def bind(obj: Any, tensor: LogicalTensor, backend: Backend, device_index: Any, where: str,
         writable: bool) -> Tuple[int, int, Any]:
    """(pointer, version, what to keep alive) for `obj` as `tensor` (a concrete shape)
    on an engine of `backend`; raises naming `where` if it does not fit."""
    version = 0
    if isinstance(obj, Tensor):
        obj, version = obj.data, obj.version
    found = _view(obj, where)
    if found.memory not in (_MEMORY_OF[backend], _host.ANY):
        raise InvalidTensorType(f"{where}: a {type(obj).__name__} in {found.memory} memory, but a "
                                f"{backend.value} engine takes {_TAKES[backend]}")
    if backend == Backend.CUDA and device_index is not None and found.device_index not in (None, device_index):
        raise InvalidTensorType(f"{where}: on CUDA device {found.device_index}, the engine is on device "
                                f"{device_index}")
    needed = _host.FLOAT_BYTES * _host.element_count(tensor.shape)
    if found.shape is not None and found.shape != tensor.shape:
        raise InvalidArgument(f"{where}: shape {list(found.shape)}, expected {list(tensor.shape)} "
                              f"({len(tensor.shape)} dimensions, as compiled)")
    if found.nbytes is not None and found.nbytes < needed:
        raise InvalidArgument(f"{where}: {found.nbytes} bytes, expected at least {needed} for shape "
                              f"{list(tensor.shape)}")
    if writable and found.readonly:
        raise InvalidArgument(f"{where}: a read-only {type(obj).__name__} cannot be an output")
    if found.memory != _host.OPENCL and found.pointer % _host.FLOAT_BYTES and needed:
        raise InvalidArgument(f"{where}: address {found.pointer:#x} is not aligned to {_host.FLOAT_BYTES} bytes")
    return found.pointer, version, found.keep

