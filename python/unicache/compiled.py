"""Compiled partitions: a partition compiled for concrete shapes on an engine.

    cp = part.compile([(m, 64), (64, 32), (32,)], engine)   # a seen shape: a cache lookup
    (y,) = cp.execute(stream, [x, w, b])                     # CPU: outputs allocated (numpy)
    cp.execute(stream, [x, w, b], [y])                       # or into the caller's outputs
    stream.wait()                                            # on a GPU, before reading y

A compiled partition keeps its engine alive; it does not need its graph.
execute() may be called from several threads at once, each with its own
stream.
"""
from __future__ import annotations

import ctypes as C
import sys
from typing import Any, List, Optional, Protocol, Sequence, Tuple

from . import _abi, _host, _lib
from ._handle import NativeHandle, Resource
from .engine import Backend, Engine, Stream
from .errors import InvalidArgument
from .logical_tensor import LogicalTensor
from .tensors import Tensor, bind


class Partition(Protocol):
    """What compiling reads of a graph's partition (unicache.graph.Partition):
    declared here so that this module does not import the graph's, which
    imports this one."""

    index: int
    inputs: List[LogicalTensor]
    outputs: List[LogicalTensor]

    def _handle(self) -> NativeHandle: ...


class CompiledPartition(Resource):
    """What Partition.compile() returns. `inputs` and `outputs` are the concrete
    logical tensors (outputs' shapes inferred), in the partition's order."""

    def __init__(self, pointer: int, engine: Engine, inputs: List[LogicalTensor], output_count: int) -> None:
        """Internal: use Partition.compile()."""
        self._own(NativeHandle(pointer, _lib.function("unicache_compiled_partition_destroy"), "compiled partition"),
                  depends_on=[engine])
        self.engine, self.inputs = engine, inputs
        self.outputs: List[LogicalTensor] = compiled_outputs(pointer, output_count)
        self._input_structs = [t._to_struct() for t in inputs]
        self._output_structs = [t._to_struct() for t in self.outputs]

    @classmethod
    def _compile(cls, partition: Partition, shapes: List[Tuple[int, ...]], engine: Engine,
                 cache_blob: Optional[bytes]) -> "CompiledPartition":
        pointer = compile_handle(partition, shapes, engine, cache_blob)
        return cls(pointer, engine, concrete_inputs(partition, shapes), len(partition.outputs))

    def execute(self, stream: Stream, inputs: Sequence[Any], outputs: Optional[Sequence[Any]] = None) -> List[Any]:
        """Runs the partition on `stream` (of this engine's backend) and returns the outputs.

        `inputs` follow `self.inputs`; see unicache.tensors for what each may be.
        `outputs=None` allocates them like the first input: torch tensors on its device
        for a torch input, else numpy arrays on a CPU engine. On a GPU the work is
        enqueued: call stream.wait() before reading outputs or changing inputs.
        Raises InvalidArgument / InvalidTensorType (checks here), ExecuteFailed.
        """
        backend = self.engine.backend
        if stream.engine.backend != backend:
            raise InvalidArgument(f"execute: a {stream.engine.backend.value} stream for a partition compiled on "
                                  f"a {backend.value} engine")
        _check_count(inputs, self.inputs, "inputs")
        if outputs is None:
            outputs = self._allocate_outputs(inputs)
        _check_count(outputs, self.outputs, "outputs")
        keep: List[Any] = []
        c_inputs = self._tensor_array(inputs, self._input_structs, self.inputs, "input", False, keep)
        c_outputs = self._tensor_array(outputs, self._output_structs, self.outputs, "output", True, keep)
        with self._handle() as cp, stream._handle() as s:
            _lib.call("unicache_compiled_partition_execute", cp, s, c_inputs, len(inputs), c_outputs, len(outputs),
                      what="execute")
        return list(outputs)

    def _tensor_array(self, objects: Sequence[Any], structs: List[_abi.LogicalTensorStruct],
                      tensors: List[LogicalTensor], role: str, writable: bool, keep: List[Any]) -> Any:
        array = (_abi.TensorStruct * max(len(objects), 1))()
        for i, obj in enumerate(objects):
            pointer, version, alive = bind(obj, tensors[i], self.engine.backend, self.engine.device_index,
                                           f"{role} {i}", writable)
            array[i].desc, array[i].data, array[i].version = structs[i], pointer, version
            keep.append(alive)
        return array

    def _allocate_outputs(self, inputs: Sequence[Any]) -> List[Any]:
        first = inputs[0].data if inputs and isinstance(inputs[0], Tensor) else (inputs[0] if inputs else None)
        if _host.is_torch_tensor(first):
            torch = sys.modules["torch"]
            return [torch.empty(t.shape, dtype=torch.float32, device=first.device) for t in self.outputs]
        if self.engine.backend != Backend.CPU:
            raise InvalidArgument(f"execute: pass outputs on a {self.engine.backend.value} engine "
                                  f"({len(self.outputs)}: {', '.join(str(t) for t in self.outputs)})")
        try:
            import numpy
        except ImportError:
            raise InvalidArgument("execute: outputs=None allocates numpy arrays, and numpy is not installed: "
                                  "pass outputs") from None
        return [numpy.empty(t.shape, numpy.float32) for t in self.outputs]

    def cache_blob_id(self) -> str:
        """32 hex digits naming this compiled partition's cache blob (the same for every
        shape its shape-agnostic kernels serve)."""
        with self._handle() as cp:
            return _lib.query_string("unicache_compiled_partition_get_cache_blob_id", cp)

    def cache_blob(self) -> bytes:
        """The device binaries of its kernels, self-checking (none on the CPU backend):
        Partition.compile(..., cache_blob=blob) takes it in another process."""
        with self._handle() as cp:
            return _lib.query_bytes("unicache_compiled_partition_get_cache_blob", cp)

    def __repr__(self) -> str:
        ins = ", ".join(str(list(t.shape)) for t in self.inputs)
        return f"<unicache.CompiledPartition ({ins}) on {self.engine!r}{' closed' if self.closed else ''}>"


def compile_handle(partition: Partition, shapes: Sequence[Tuple[int, ...]], engine: Engine,
                   cache_blob: Optional[bytes] = None) -> int:
    """unicache_compile (or unicache_compile_from_cache_blob): the raw C handle of
    the compiled partition. Its owner destroys it (unicache_compiled_partition_destroy)
    while `engine` is alive; CompiledPartition is the owner Python code wants."""
    ndims, pointers, keep = _lib.shape_arrays(list(shapes))
    handle = C.c_void_p()
    what = f"compile partition {partition.index} for {[list(s) for s in shapes]}"
    with partition._handle() as p, engine._handle() as e:
        if cache_blob is None:
            _lib.call("unicache_compile", p, len(shapes), ndims, pointers, e, C.byref(handle), what=what)
        else:
            blob = bytes(cache_blob)
            _lib.call("unicache_compile_from_cache_blob", p, len(shapes), ndims, pointers, e, blob, len(blob),
                      C.byref(handle), what=what)
    return handle.value or 0


def concrete_inputs(partition: Partition, shapes: Sequence[Tuple[int, ...]]) -> List[LogicalTensor]:
    """The partition's input tensors with the shapes it was compiled for."""
    return [LogicalTensor(t.id, s, t.is_constant) for t, s in zip(partition.inputs, shapes)]


def compiled_outputs(pointer: int, count: int) -> List[LogicalTensor]:
    """A compiled partition's output tensors (shapes inferred), from its C handle."""
    out = _abi.LogicalTensorStruct()
    outputs = []
    for i in range(count):
        _lib.call("unicache_compiled_partition_get_output", pointer, i, C.byref(out))
        outputs.append(LogicalTensor._from_struct(out))
    return outputs


def _check_count(given: Sequence[Any], expected: List[LogicalTensor], what: str) -> None:
    if isinstance(given, (str, bytes)) or not hasattr(given, "__len__"):
        raise InvalidArgument(f"execute: {what} is a list (one per {what[:-1]}), got {type(given).__name__}")
    if len(given) != len(expected):
        raise InvalidArgument(f"execute: expected {len(expected)} {what} "
                              f"({', '.join(str(t) for t in expected)}), got {len(given)}")
