"""Graphs: tensors, ops, finalize() and the partitions it makes.

    g = unicache.Graph()
    x = g.add_tensor([-1, 64])                    # -1: known only when compiling
    w = g.add_tensor([64, 32], constant=True)     # a weight: packed once
    y = g.add_tensor([-1, 32])
    g.add_op(unicache.OpKind.MATMUL, [x, w], [y])
    g.finalize()                                  # InvalidGraph names the op and tensor
    part = g.partitions[0]

A graph is built by one thread (its methods are not thread-safe); once
finalized, its partitions may be compiled from any thread.

A graph has a JSON form (docs/graph-json.md), to compile it elsewhere:
`text = g.to_json(requests=[{x: [8, 64]}])`, then `Graph.from_json(text)`.
"""
from __future__ import annotations

import collections.abc
import ctypes as C
import enum
import operator
from typing import TYPE_CHECKING, Any, List, Mapping, Optional, Sequence, Tuple, Union

from . import _abi, _lib
from ._handle import NativeHandle, Resource
from .errors import InvalidArgument
from .logical_tensor import LogicalTensor

if TYPE_CHECKING:
    from .compiled import CompiledPartition
    from .engine import Engine


class OpKind(enum.IntEnum):
    """`unicache_op_kind_t`. A new kind is one line here (with its value in C)."""

    MATMUL = 0  # transpose_a / transpose_b; rank 2, or rank 3 (batched)
    ADD = 1  # numpy broadcasting
    MULTIPLY = 2  # numpy broadcasting
    RELU = 3
    GELU_ERF = 4
    GELU_TANH = 5
    SIGMOID = 6
    TANH = 7
    SOFTMAX = 8  # over the last axis
    LAYER_NORM = 9  # over the last axis; inputs x, gamma, beta ([C]); epsilon via Graph.set_op_attr
    TRANSPOSE = 10  # permutes axes as torch.permute (Graph.set_op_attr_ints PERMUTATION); dense output
    SQRT = 11
    RSQRT = 12  # 1 / sqrt(x)
    SILU = 13  # x * sigmoid(x)
    RMS_NORM = 14  # over the last axis; inputs x, gamma ([C]); epsilon via Graph.set_op_attr
    ATTENTION = 15  # softmax(scale * Q K^T + mask) V; inputs Q, K, V[, mask]; SCALE, CAUSAL, LAYOUT


class OpAttr(enum.IntEnum):
    """`unicache_op_attr_t`: an op's attributes (Graph.set_op_attr, set_op_attr_ints)."""

    EPSILON = 0  # LayerNorm, RMSNorm (float): added to the variance; finite, >= 0; default 1e-5
    PERMUTATION = 1  # Transpose (ints): output dim i is input dim values[i]; required, rank <= 6
    SCALE = 2  # Attention (float): multiplies Q K^T; finite, nonzero; default 1 / sqrt(head size)
    CAUSAL = 3  # Attention (ints, one value): 1 hides key j from query i where j > i; default 0
    LAYOUT = 4  # Attention (ints, one value): an AttentionLayout; default BHLD


class AttentionLayout(enum.IntEnum):
    """`unicache_attention_layout_t`: how Attention's tensors hold batch, heads and sequence."""

    BHLD = 0  # Q [..., L, D], K [..., S, D], V [..., S, Dv] (torch's scaled_dot_product_attention)
    BLHD = 1  # Q [B, L, H, D], K [B, S, H, D], V [B, S, H, Dv] (a projection's output viewed per head)


UNKNOWN_DIM = _abi.UNKNOWN_DIM


def check_shape(shape: Sequence[int], what: str, allow_unknown: bool) -> Tuple[int, ...]:
    """`shape` as a tuple of ints, checked: at most 8 dims, each >= 0 (or -1 where allowed)."""
    try:
        dims = tuple(operator.index(d) for d in shape)
    except TypeError:
        raise InvalidArgument(f"{what}: a shape is a sequence of ints, got {shape!r}") from None
    if len(dims) > _abi.MAX_NDIMS:
        raise InvalidArgument(f"{what}: {len(dims)} dimensions, at most {_abi.MAX_NDIMS}")
    lowest = UNKNOWN_DIM if allow_unknown else 0
    if any(d < lowest for d in dims):
        raise InvalidArgument(f"{what}: shape {list(dims)}: dimensions must be >= {lowest}")
    return dims


TensorRef = Union[LogicalTensor, int]


def _ids(tensors: Sequence[TensorRef], what: str) -> C.Array:
    try:
        ids = [t.id if isinstance(t, LogicalTensor) else operator.index(t) for t in tensors]
    except TypeError:
        raise InvalidArgument(f"{what}: expected LogicalTensors (or their ids), got {tensors!r}") from None
    return (C.c_uint64 * max(len(ids), 1))(*ids)


def _request_structs(requests: Sequence[Mapping[TensorRef, Sequence[int]]]) -> Tuple[C.Array, List[Any]]:
    """The requests as unicache_shape_request_t structs, and the arrays they point into."""
    keep: List[Any] = []
    structs = (_abi.ShapeRequestStruct * max(len(requests), 1))()
    for k, request in enumerate(requests):
        if not isinstance(request, collections.abc.Mapping):
            raise InvalidArgument(f"to_json: requests[{k}]: a request is a dict {{tensor or id: shape}}, "
                                  f"got {request!r}")
        shapes = (_abi.TensorShapeStruct * max(len(request), 1))()
        for i, (tensor, shape) in enumerate(request.items()):
            (tensor_id,) = _ids([tensor], f"to_json: requests[{k}]")
            dims = check_shape(shape, f"to_json: requests[{k}]: tensor {tensor_id}", allow_unknown=False)
            row = (C.c_int64 * max(len(dims), 1))(*dims)
            keep.append(row)
            shapes[i] = _abi.TensorShapeStruct(tensor_id, len(dims), C.cast(row, C.POINTER(C.c_int64)))
        keep.append(shapes)
        structs[k] = _abi.ShapeRequestStruct(C.cast(shapes, C.POINTER(_abi.TensorShapeStruct)), len(request))
    return structs, keep


class Graph(Resource):
    """A graph under construction, then finalized into partitions.

    Owns its C handle: close() (or `with`) releases it; partitions handed out
    keep it alive until they are gone. Not thread-safe while being built.
    """

    def __init__(self) -> None:
        handle = C.c_void_p()
        _lib.call("unicache_graph_create", C.byref(handle))
        self._adopt(handle.value or 0)

    def _adopt(self, pointer: int) -> None:
        destroy = _lib.function("unicache_graph_destroy")
        self._own(NativeHandle(pointer, destroy, "graph"))
        self._partitions: Optional[List[Partition]] = None

    @classmethod
    def from_json(cls, text: Union[str, bytes]) -> "Graph":
        """A new graph, finalized, from a graph JSON document (docs/graph-json.md).

        InvalidGraph, whose message names the place ("graph JSON: ops[3].inputs[1]:
        tensor 17 is not declared"), for text that is malformed, above 64 MiB or not
        a valid graph. The document's requests are checked, not kept."""
        if isinstance(text, str):
            data = text.encode("utf-8", errors="surrogateescape")
        elif isinstance(text, (bytes, bytearray, memoryview)):
            data = bytes(text)
        else:
            raise InvalidArgument(f"from_json: expected the document as str or bytes, got {type(text).__name__}")
        handle = C.c_void_p()
        _lib.call("unicache_graph_create_from_json", data, len(data), C.byref(handle), what="from_json")
        graph = cls.__new__(cls)
        graph._adopt(handle.value or 0)
        return graph

    def to_json(self, requests: Optional[Sequence[Mapping[TensorRef, Sequence[int]]]] = None) -> str:
        """The graph (finalized or not) as a graph JSON document (docs/graph-json.md).

        `requests`: concrete shapes to compile for, each a dict from an input tensor
        (or its id) to its shape without -1; every input with a -1 in its declared
        shape must be given. InvalidGraph for a request that does not fit the
        graph's inputs, or a graph the form cannot hold (a rank above 8)."""
        given = list(requests or [])
        structs, _arrays = _request_structs(given)  # _arrays: what structs point into, alive for the call
        with self._handle() as g:
            return _lib.query_string("unicache_graph_to_json", g, structs, len(given), what="to_json")

    def add_tensor(self, shape: Sequence[int], constant: bool = False) -> LogicalTensor:
        """Declares an f32 tensor; -1 marks a dimension given when compiling."""
        dims = check_shape(shape, "add_tensor", allow_unknown=True)
        out = _abi.LogicalTensorStruct()
        with self._handle() as g:
            _lib.call("unicache_graph_add_tensor", g, len(dims), (C.c_int64 * max(len(dims), 1))(*dims),
                      int(bool(constant)), C.byref(out))
        return LogicalTensor._from_struct(out)

    def add_op(self, kind: Union[OpKind, int], inputs: Sequence[TensorRef], outputs: Sequence[TensorRef],
               transpose_a: bool = False, transpose_b: bool = False) -> int:
        """Adds an op reading `inputs` and writing `outputs`; returns its id.
        Arity, shapes and kinds are checked by finalize() (InvalidGraph)."""
        try:
            kind_value = operator.index(kind)
        except TypeError:
            raise InvalidArgument(f"add_op: an op kind is an OpKind, got {kind!r}") from None
        op_id = C.c_uint64()
        ins, outs = _ids(inputs, "add_op inputs"), _ids(outputs, "add_op outputs")
        with self._handle() as g:
            _lib.call("unicache_graph_add_op", g, kind_value, ins, len(inputs), outs, len(outputs),
                      int(bool(transpose_a)), int(bool(transpose_b)), C.byref(op_id))
        return op_id.value

    def set_op_attr(self, op_id: int, attr: Union[OpAttr, int], value: float) -> None:
        """Sets a float attribute of op `op_id` (from add_op): InvalidGraph for an op
        without it or a value out of range; nothing changes then."""
        with self._handle() as g:
            _lib.call("unicache_graph_set_op_attr_f32", g, operator.index(op_id), operator.index(attr),
                      float(value), what="set_op_attr")

    def set_op_attr_ints(self, op_id: int, attr: Union[OpAttr, int], values: Sequence[int]) -> None:
        """Sets an integer-list attribute of op `op_id` (PERMUTATION: each axis of the
        input once; CAUSAL and LAYOUT: one value): InvalidGraph for an op without it
        or too many values; the rank is checked by finalize()."""
        try:
            ints = [operator.index(v) for v in values]
        except TypeError:
            raise InvalidArgument(f"set_op_attr_ints: expected integers, got {values!r}") from None
        if any(not -2**63 <= v < 2**63 for v in ints):
            raise InvalidArgument(f"set_op_attr_ints: {values!r} has a value outside int64")
        with self._handle() as g:
            _lib.call("unicache_graph_set_op_attr_i64s", g, operator.index(op_id), operator.index(attr),
                      (C.c_int64 * max(len(ints), 1))(*ints), len(ints), what="set_op_attr_ints")

    def mark_output(self, tensor: TensorRef) -> None:
        """Declares that the caller reads `tensor` itself (between partitions): it is
        then a partition's output, and no fused chain passes through it."""
        (tensor_id,) = _ids([tensor], "mark_output")
        with self._handle() as g:
            _lib.call("unicache_graph_mark_output", g, tensor_id, what="mark_output")

    def finalize(self) -> None:
        """Validates and partitions the graph; InvalidGraph with the reason. Idempotent."""
        with self._handle() as g:
            _lib.call("unicache_graph_finalize", g, what="finalize")

    @property
    def partitions(self) -> List["Partition"]:
        """The partitions, in dependency order (InvalidArgument before finalize())."""
        if self._partitions is None:
            count = C.c_size_t()
            with self._handle() as g:
                _lib.call("unicache_graph_get_partition_count", g, C.byref(count), what="partitions")
                found = []
                for i in range(count.value):
                    p = C.c_void_p()
                    _lib.call("unicache_graph_get_partition", g, i, C.byref(p))
                    found.append(Partition(self, p.value or 0, i))
            self._partitions = found
        return list(self._partitions)

    def close(self) -> None:
        self._partitions = None
        super().close()


class Partition(Resource):
    """A fused group of ops, compiled for concrete shapes with compile().

    Borrowed from its graph, which it keeps alive (the graph's C handle lives
    until its partitions are gone). Thread-safe: compile from any thread.
    """

    def __init__(self, graph: Graph, pointer: int, index: int) -> None:
        self._pointer, self.index = pointer, index
        # Destroying a partition is nothing: it lives in its graph, which it holds.
        self._own(NativeHandle(pointer, lambda _: 0, "partition"), depends_on=[graph])
        self.inputs: List[LogicalTensor] = self._tensors("input")
        self.outputs: List[LogicalTensor] = self._tensors("output")
        # 32 hex digits naming the structure: equal for equal partitions (the same
        # layer repeated), in any process.
        self.fingerprint: str = _lib.query_string("unicache_partition_get_fingerprint", pointer, expected=33)

    def _tensors(self, which: str) -> List[LogicalTensor]:
        count, out = C.c_size_t(), _abi.LogicalTensorStruct()
        _lib.call(f"unicache_partition_get_{which}_count", self._pointer, C.byref(count))
        tensors = []
        for i in range(count.value):
            _lib.call(f"unicache_partition_get_{which}", self._pointer, i, C.byref(out))
            tensors.append(LogicalTensor._from_struct(out))
        return tensors

    def check_shapes(self, shapes: Sequence[Sequence[int]]) -> List[Tuple[int, ...]]:
        """The concrete input shapes, checked against inputs: their count, each one's
        rank and declared dimensions (InvalidArgument naming the input)."""
        if len(shapes) != len(self.inputs):
            raise InvalidArgument(f"partition {self.index}: expected {len(self.inputs)} input shapes "
                                  f"({', '.join(str(t) for t in self.inputs)}), got {len(shapes)}")
        checked = []
        for i, (shape, tensor) in enumerate(zip(shapes, self.inputs)):
            dims = check_shape(shape, f"input {i}", allow_unknown=False)
            fits = len(dims) == len(tensor.shape) and all(d == t or t == UNKNOWN_DIM
                                                          for d, t in zip(dims, tensor.shape))
            if not fits:
                raise InvalidArgument(f"input {i}: shape {list(dims)} does not fit the declared "
                                      f"{list(tensor.shape)} ({len(tensor.shape)} dimensions, -1 any size)")
            checked.append(dims)
        return checked

    def compile(self, shapes: Sequence[Sequence[int]], engine: "Engine",
                cache_blob: Optional[bytes] = None) -> "CompiledPartition":
        """Compiles for concrete input shapes (one per input, in order) on `engine`.

        A shape compiled before is a kernel-cache lookup. With `cache_blob` (from
        CompiledPartition.cache_blob()) the kernels come from the blob instead of
        being built. CompileFailed if the shapes do not fit or the backend fails.
        """
        from .compiled import CompiledPartition
        return CompiledPartition._compile(self, self.check_shapes(shapes), engine, cache_blob)

    def cache_blob_id(self, shapes: Sequence[Sequence[int]], engine: "Engine") -> str:
        """The id (32 hex digits) of the cache blob compile() would give, without compiling."""
        dims = self.check_shapes(shapes)
        ndims, pointers, keep = _lib.shape_arrays(dims)
        with self._handle(), engine._handle() as e:
            return _lib.query_string("unicache_get_cache_blob_id", self._pointer, len(dims), ndims, pointers, e)
