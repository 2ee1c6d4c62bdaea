"""Views of the memory behind an array-like object, without a copy.

One function, `view()`, reads what a numpy array, a torch tensor, an object
with `__array_interface__`, `__cuda_array_interface__` or `__dlpack__`, or a
writable buffer of floats (array.array('f')) says about its memory: the
address, the shape, where it lives. It checks the dtype (float32) and
layout (C-contiguous) and raises the package's errors naming `where`.
Nothing here imports numpy or torch: an object of theirs is recognised by
its interfaces, and torch's module is already loaded if one exists.
"""
from __future__ import annotations

import ctypes as C
import sys
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence, Tuple

from .errors import InvalidArgument, InvalidTensorType

HOST, CUDA, OPENCL, ANY = "host", "cuda", "opencl", "any"
FLOAT_BYTES = 4


@dataclass
class View:
    """Where an object's data is. `shape` None: not known (a raw pointer, a buffer)."""

    pointer: int
    memory: str  # HOST, CUDA, OPENCL or ANY (a raw pointer the caller vouches for)
    shape: Optional[Tuple[int, ...]]
    nbytes: Optional[int]
    readonly: bool = False
    device_index: Optional[int] = None
    keep: Any = None  # what must stay alive while the pointer is used


def _type_name(obj: Any) -> str:
    t = type(obj)
    return f"{t.__module__}.{t.__qualname__}" if t.__module__ != "builtins" else t.__qualname__


def _c_strides(shape: Sequence[int], itemsize: int) -> Tuple[int, ...]:
    strides, step = [], itemsize
    for d in reversed(shape):
        strides.append(step)
        step *= max(d, 1)
    return tuple(reversed(strides))


def _is_contiguous(shape: Sequence[int], strides: Optional[Sequence[int]], itemsize: int) -> bool:
    if strides is None or 0 in shape:
        return True
    return all(s == c or d == 1 for d, s, c in zip(shape, strides, _c_strides(shape, itemsize)))


def element_count(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def is_torch_tensor(obj: Any) -> bool:
    """Whether `obj` is a torch.Tensor (without importing torch: if it is one, torch is loaded)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def _from_torch(t: Any, where: str) -> View:
    torch = sys.modules["torch"]
    if t.dtype != torch.float32:
        raise InvalidTensorType(f"{where}: a torch tensor of dtype {t.dtype}, expected torch.float32")
    if t.layout != torch.strided:
        raise InvalidTensorType(f"{where}: a torch tensor of layout {t.layout}, expected torch.strided")
    if not t.is_contiguous():
        raise InvalidArgument(f"{where}: the torch tensor is not contiguous (strides {tuple(t.stride())}); "
                              f"pass tensor.contiguous()")
    memory = {"cpu": HOST, "cuda": CUDA}.get(t.device.type)
    if memory is None:
        raise InvalidTensorType(f"{where}: a torch tensor on device {t.device}: unicache takes 'cpu' and 'cuda'")
    shape = tuple(t.shape)
    return View(t.data_ptr(), memory, shape, element_count(shape) * FLOAT_BYTES, False, t.device.index, t)


def _from_array_interface(obj: Any, iface: Dict[str, Any], memory: str, where: str) -> View:
    typestr = iface.get("typestr", "")
    little = sys.byteorder == "little"
    if typestr[1:] != "f4" or typestr[:1] not in ("=", "<" if little else ">"):
        dtype = getattr(obj, "dtype", typestr)
        raise InvalidTensorType(f"{where}: a {_type_name(obj)} of dtype {dtype} ('{typestr}'), expected float32 "
                                f"in native byte order")
    data = iface.get("data")
    if not isinstance(data, tuple) or iface.get("mask") is not None:
        raise InvalidTensorType(f"{where}: a {_type_name(obj)} whose interface gives no data pointer")
    shape = tuple(int(d) for d in iface["shape"])
    if not _is_contiguous(shape, iface.get("strides"), FLOAT_BYTES):
        raise InvalidArgument(f"{where}: the {_type_name(obj)} is not C-contiguous (strides "
                              f"{tuple(iface['strides'])}); pass a contiguous copy (numpy.ascontiguousarray)")
    return View(int(data[0] or 0), memory, shape, element_count(shape) * FLOAT_BYTES, bool(data[1]), None, obj)


class _DLDevice(C.Structure):
    _fields_ = [("device_type", C.c_int32), ("device_id", C.c_int32)]


class _DLDataType(C.Structure):
    _fields_ = [("code", C.c_uint8), ("bits", C.c_uint8), ("lanes", C.c_uint16)]


class _DLTensor(C.Structure):
    _fields_ = [("data", C.c_void_p), ("device", _DLDevice), ("ndim", C.c_int32), ("dtype", _DLDataType),
                ("shape", C.POINTER(C.c_int64)), ("strides", C.POINTER(C.c_int64)), ("byte_offset", C.c_uint64)]


_DL_MEMORY = {1: HOST, 3: HOST, 2: CUDA, 13: CUDA}  # kDLCPU, kDLCUDAHost, kDLCUDA, kDLCUDAManaged
_DL_FLOAT = 2


def _from_dlpack(obj: Any, where: str) -> View:
    device_type = obj.__dlpack_device__()[0] if hasattr(obj, "__dlpack_device__") else None
    if device_type is not None and int(device_type) not in _DL_MEMORY:
        raise InvalidTensorType(f"{where}: a {_type_name(obj)} on DLPack device type {int(device_type)}: "
                                f"unicache takes CPU and CUDA memory")
    # Not consumed: the capsule's destructor returns the tensor to its producer
    # once `keep` (the capsule) is gone, after the call.
    capsule = obj.__dlpack__()
    get = C.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = C.c_void_p, [C.py_object, C.c_char_p]
    t = _DLTensor.from_address(get(capsule, b"dltensor"))
    memory = _DL_MEMORY.get(t.device.device_type)
    if memory is None:
        raise InvalidTensorType(f"{where}: DLPack device type {t.device.device_type}: unicache takes CPU and CUDA")
    if (t.dtype.code, t.dtype.bits, t.dtype.lanes) != (_DL_FLOAT, 32, 1):
        raise InvalidTensorType(f"{where}: DLPack dtype (code {t.dtype.code}, {t.dtype.bits} bits, "
                                f"{t.dtype.lanes} lanes), expected float32")
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = None if not t.strides else tuple(t.strides[i] * FLOAT_BYTES for i in range(t.ndim))
    if not _is_contiguous(shape, strides, FLOAT_BYTES):
        raise InvalidArgument(f"{where}: the {_type_name(obj)} is not C-contiguous")
    pointer = (t.data or 0) + t.byte_offset
    return View(pointer, memory, shape, element_count(shape) * FLOAT_BYTES, False, t.device.device_id, capsule)


def _from_buffer(obj: Any, where: str) -> Optional[View]:
    try:
        m = memoryview(obj)
    except TypeError:
        return None
    if m.format != "f" or not m.c_contiguous:
        raise InvalidTensorType(f"{where}: a {_type_name(obj)} buffer of format '{m.format}' "
                                f"{'' if m.c_contiguous else '(not contiguous) '}, expected contiguous 'f' (float32)")
    if m.readonly:
        raise InvalidArgument(f"{where}: a read-only {_type_name(obj)} buffer: pass a numpy array instead")
    anchor = (C.c_char * max(m.nbytes, 1)).from_buffer(m) if m.nbytes else None
    return View(C.addressof(anchor) if anchor is not None else 0, HOST, tuple(m.shape or ()), m.nbytes, False, None,
                (m, anchor))


def view(obj: Any, where: str) -> View:
    """What `obj` says about its memory. InvalidTensorType if it is none of the kinds above."""
    if is_torch_tensor(obj):
        return _from_torch(obj, where)
    iface = getattr(obj, "__cuda_array_interface__", None)
    if iface is not None:
        return _from_array_interface(obj, iface, CUDA, where)
    iface = getattr(obj, "__array_interface__", None)
    if iface is not None:
        return _from_array_interface(obj, iface, HOST, where)
    if hasattr(obj, "__dlpack__"):
        return _from_dlpack(obj, where)
    found = _from_buffer(obj, where)
    if found is None:
        raise InvalidTensorType(f"{where}: a {_type_name(obj)} is not a tensor unicache can read: pass a numpy "
                                f"array, a torch tensor, an OpenCLBuffer or CudaBuffer, an object with "
                                f"__array_interface__, __cuda_array_interface__ or __dlpack__, or a pointer as an int")
    return found


def host_memory(obj: Any, where: str, writable: bool) -> View:
    """A host array's view for a copy to or from a device buffer (any shape)."""
    found = view(obj, where)
    if found.memory != HOST:
        raise InvalidTensorType(f"{where}: a {_type_name(obj)} in {found.memory} memory, expected host memory")
    if writable and found.readonly:
        raise InvalidArgument(f"{where}: the {_type_name(obj)} is read-only")
    return found
