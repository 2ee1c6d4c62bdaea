"""The compiled module: torch's nodes and unicache's partitions run in the
FX graph's order. A partition is compiled once per input shape signature
(a cache lookup in unicache when another signature compiled its kernels);
what a signature needs (compiled partitions, the C tensor descriptions,
output shapes) is kept, so a repeated shape costs pointer updates and one C
call per partition.

On CUDA every partition is enqueued on torch's current stream of the device
and nothing waits: the caller synchronizes as with torch. Temporaries come
from torch's caching allocator on that stream, which orders their reuse
after the work enqueued before it.
"""
from __future__ import annotations

import ctypes as C
import itertools
import keyword
import linecache
import struct
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.fx

from .. import _abi, _lib
from ..engine import Engine, Stream
from ..errors import Error, InvalidArgument, InvalidTensorType, error_for
from ..graph import Partition
from . import _report
from ._capture import TensorInfo, attribute
from ._lowering import Lowered, Source, view_shape


_serials = itertools.count(1)


@dataclass
class TorchStep:
    """An FX node torch runs (copied as it is into the generated forward)."""

    node: torch.fx.Node


@dataclass
class PartitionStep:
    """A unicache partition, run where the FX graph computes its output."""

    partition: Partition
    sources: List[Source]
    output_node: torch.fx.Node
    output_view: str

    views: Tuple[str, ...] = ()  # the sources' and the output's, part of the compiled key
    slot_template: Optional[bytes] = None  # _slot_template(partition), made at the first compile

    def __post_init__(self) -> None:
        self.views = tuple(s.view for s in self.sources) + (self.output_view,)


# A partition structure compiled for one set of input shapes, shared by every step
# of that structure and those shapes: (C handle, the address of `slots`, the
# output's torch shape, slots). `slots` is a bytearray of TensorStructs, the
# inputs' then the output's, whose data pointers and versions a call writes
# before it executes. Everything kept per shape is a tuple of ints or bytes-like:
# nothing the cyclic garbage collector keeps tracking, so a stream of new shapes
# does not grow the objects a full collection walks (those took 100-170 ms, at
# the same request of every process, when each shape kept ~300 Python objects).
_SLOT = C.sizeof(_abi.TensorStruct)
_DATA = _abi.TensorStruct.data.offset
_DATA_AND_VERSION = struct.Struct("=QQ")
_POINTER = struct.Struct("=Q")
assert _abi.TensorStruct.version.offset == _DATA + 8
_NDIMS = _abi.TensorStruct.desc.offset + _abi.LogicalTensorStruct.ndims.offset
_DIMS = _abi.TensorStruct.desc.offset + _abi.LogicalTensorStruct.dims.offset
_NDIMS_FIELD = struct.Struct("=i")


def _slot_template(partition: Partition) -> bytes:
    """TensorStructs for the partition's inputs and its output: the inputs' ids and
    constness set, shapes, data and versions zero (a compile writes the shapes)."""
    slots = (_abi.TensorStruct * (len(partition.inputs) + 1))()
    for slot, tensor in zip(slots, partition.inputs):
        slot.desc.id, slot.desc.is_constant = tensor.id, int(tensor.is_constant)
    return bytes(slots)


@dataclass
class InputSpec:
    """What the module takes at one position: dtype, device, shape (None: dynamic)."""

    dtype: Optional[torch.dtype]  # None: an integer (a size dynamo passes)
    device: Optional[torch.device]
    dims: Tuple[Optional[int], ...]
    feeds_unicache: bool

    def describe(self) -> str:
        return "[" + ", ".join("-1" if d is None else str(d) for d in self.dims) + "]"


class CompiledModule(torch.nn.Module):
    """What unicache.torch.compile returns: call it as the module it was made from.

    Thread safety: one call at a time per CompiledModule (as torch modules
    are used); distinct CompiledModules may run on distinct threads.
    """

    def __init__(self, root: torch.nn.Module, lowered: Lowered, steps: List[Any],
                 placeholders: List[torch.fx.Node], specs: List[InputSpec], output: Any, engine: Engine,
                 device: torch.device) -> None:
        super().__init__()
        self.root = root  # keeps the parameters (the constants' storage) registered and alive
        self._lowered, self._steps, self._placeholders = lowered, steps, placeholders
        self._specs, self._output, self._engine, self.device = specs, output, engine, device
        # Compiled partitions by (structure, input shapes, views): the layers of a
        # model repeat a few structures, so a new shape compiles each once. At most
        # max_compiled are kept, the oldest dropped first (compiling it again is a
        # lookup in unicache's kernel cache); the C handles left are destroyed with
        # this module, before its engine. Destroying one while queued work uses its
        # kernels is safe: a GPU kernel is released after its last execution.
        self._compiled: Dict[Tuple[Any, ...], Tuple[int, int, Tuple[int, ...], bytearray]] = {}
        self.max_compiled = MAX_COMPILED
        self._compile_count = 0
        self._destroy = _lib.function("unicache_compiled_partition_destroy")
        # Not at interpreter exit: a daemon thread may still be in a call then.
        weakref.finalize(self, _destroy_compiled, self._compiled, self._destroy, engine).atexit = False
        self._signatures: set = set()
        self._streams: Dict[int, Stream] = {}
        self._stream = 0
        self._execute = _raw_execute()
        self._unicache_compile, self._get_output = _raw_compile()
        # Versions are this module's serial and the tensor's torch version: a
        # weight at an address another (freed) module's weight had is not
        # taken for it.
        self._serial = next(_serials)
        self._version_base = self._serial << 40
        self._runner = self._generate_forward(root)
        self._lock = threading.Lock()

    # --- What was made -------------------------------------------------------

    @property
    def partitions(self) -> int:
        """How many unicache partitions the module runs."""
        return sum(isinstance(s, PartitionStep) for s in self._steps)

    @property
    def torch_nodes(self) -> List[str]:
        """The FX nodes torch runs (views, reshapes, anything the IR lacks), by name."""
        return [s.node.name for s in self._steps if isinstance(s, TorchStep)]

    @property
    def engine(self) -> Engine:
        """The unicache engine the partitions run on (Engine.build_stats() counts its builds)."""
        return self._engine

    @property
    def compiles(self) -> int:
        """Partitions compiled so far: one per structure and new input shapes (a
        repeated layer shares its compilation; one dropped for max_compiled and
        met again counts again)."""
        return self._compile_count

    @property
    def kept(self) -> int:
        """Compiled partitions kept now (at most max_compiled)."""
        return len(self._compiled)

    @property
    def signatures(self) -> int:
        """How many input shape signatures have been seen."""
        return len(self._signatures)

    # --- Running -------------------------------------------------------------

    def _generate_forward(self, root: torch.nn.Module) -> Callable[..., Any]:
        """The steps as one generated Python function: torch's nodes as calls of
        their targets, each partition one call; no interpreter between them. Each
        value is dropped after its last use, as torch.fx's code does. Written here
        rather than by torch.fx (a GraphModule of the steps): that took 16 ms of a
        BERT encoder's 33 ms of lowering on the dev VM, this 6 ms, and a call skips
        nn.Module's."""
        writer = _ForwardWriter(root, self._lowered.resolve, self._serial)
        forward = writer.write(self._placeholders, self._steps, self._output, self._partition_call)
        weakref.finalize(self, linecache.cache.pop, writer.filename, None).atexit = False  # its source, for tracebacks
        return forward

    def _partition_call(self, step: PartitionStep) -> Callable[..., torch.Tensor]:
        """The step's call in the generated forward. It runs once per partition
        per request, so what does not change between calls is bound here: which
        sources are parameters (read from their module at each call), the key's
        structure part, the device and dtype checked."""
        sources = step.sources
        getters = tuple(None if s.node is not None else s.current for s in sources)
        reads_constants = any(g is not None for g in getters)
        structure = (step.partition.fingerprint, step.views)
        compiled = self._compiled
        device = self.device
        f32 = torch.float32
        empty = torch.empty
        version_base = self._version_base
        pack_into, pack_pointer = _DATA_AND_VERSION.pack_into, _POINTER.pack_into

        def unicache_partition(*found: torch.Tensor) -> torch.Tensor:
            if reads_constants:
                args = iter(found)
                tensors = [next(args) if g is None else g() for g in getters]
            else:
                tensors = list(found)
            for i, t in enumerate(tensors):
                if getters[i] is None:
                    if t.dtype is not f32:
                        raise InvalidTensorType(f"{sources[i].node}: torch made a {t.dtype} tensor where unicache "
                                                "reads f32")
                    if not t.is_contiguous():
                        tensors[i] = t.contiguous()
                elif t.dtype is not f32 or t.device != device or not t.is_contiguous():
                    raise InvalidTensorType(f"parameter {sources[i].attribute or 'constant'} is now {t.dtype} on "
                                            f"{t.device}{'' if t.is_contiguous() else ', not contiguous'}; the "
                                            f"module was compiled for contiguous float32 on {device}: compile again")
            shapes = tuple([t.shape for t in tensors])
            c = compiled.get((structure, shapes))
            if c is None:
                c = self._compile(step, tensors)
                while compiled and len(compiled) >= self.max_compiled:
                    self._destroy(compiled.pop(next(iter(compiled)))[0])
                compiled[(structure, tuple(map(tuple, shapes)))] = c  # plain tuples: untracked by the collector
            pointer, address, output_shape, slots = c
            out = empty(output_shape, dtype=f32, device=device)
            at = 0  # the slot's offset in slots: the inputs', then the output's
            for t in tensors:
                pack_into(slots, at + _DATA, t.data_ptr(), version_base | t._version)
                at += _SLOT
            pack_pointer(slots, at + _DATA, out.data_ptr())
            status = self._execute(pointer, self._stream, address, len(tensors), address + at, 1)
            if status:
                raise error_for(status, _lib.last_error(), f"executing the partition of {step.output_node.name}")
            return out
        unicache_partition.__name__ = unicache_partition.__qualname__ = f"unicache_{step.output_node.name}"
        return unicache_partition

    def forward(self, *inputs: Any) -> Any:
        self._check(inputs)
        with self._lock:  # the C descriptions and the stream are shared by calls
            self._signatures.add(tuple(tuple(t.shape) if isinstance(t, torch.Tensor) else t for t in inputs))
            self._stream = self._stream_pointer()
            return self._runner(*inputs)

    def _check(self, inputs: Sequence[Any]) -> None:
        if len(inputs) != len(self._specs):
            raise InvalidArgument(f"the compiled module takes {len(self._specs)} inputs, got {len(inputs)}")
        for i, (t, spec) in enumerate(zip(inputs, self._specs)):
            if spec.dtype is None:
                if not isinstance(t, int):
                    raise InvalidTensorType(f"input {i}: an int (a size), got {type(t).__name__}")
                continue
            if not isinstance(t, torch.Tensor):
                raise InvalidTensorType(f"input {i}: a torch.Tensor, got {type(t).__name__}")
            if t.dtype != spec.dtype:
                raise InvalidTensorType(f"input {i}: dtype {t.dtype}, but the module was compiled for "
                                        f"{spec.dtype}")
            if t.device != spec.device:
                raise InvalidTensorType(f"input {i}: on {t.device}, but the module was compiled for {spec.device}")
            fits = t.dim() == len(spec.dims) and all(d is None or d == s for d, s in zip(spec.dims, t.shape))
            if not fits or (t.numel() == 0 and spec.feeds_unicache):
                raise InvalidArgument(f"input {i}: shape {list(t.shape)} does not fit {spec.describe()} "
                                      "(-1: a dynamic dimension, any positive size)")
            if spec.feeds_unicache and not t.is_contiguous():
                raise InvalidArgument(f"input {i}: not contiguous (strides {list(t.stride())}); pass "
                                      "t.contiguous()")

    def _stream_pointer(self) -> int:
        if self.device.type != "cuda":
            key = 0
        else:
            key = torch.cuda.current_stream(self.device).cuda_stream
        stream = self._streams.get(key)
        if stream is None:
            # torch counts its parameters' in-place changes (_version, passed as the
            # tensors' version), and the module keeps them alive: no contents check.
            cuda = self.device.type == "cuda"
            stream = self._engine.stream(key if cuda else None, versioned_constants=cuda)
            self._streams[key] = stream
        return stream._handle().pointer

    def _compile(self, step: PartitionStep,
                 tensors: List[torch.Tensor]) -> Tuple[int, int, Tuple[int, ...], bytearray]:
        """The step's partition compiled for these tensors' shapes. Every new shape
        of a request compiles each structure (a lookup of kernels built before), so
        the C descriptions are written straight into the slots: the inputs' shapes
        over the step's template (ids, constness), then read by unicache_compile
        from there, and the output's written there by the library."""
        shapes = [tuple(t.shape) if s.node is None else view_shape(t.shape, s.view)
                  for t, s in zip(tensors, step.sources)]
        count = len(shapes)
        if step.slot_template is None:
            step.slot_template = _slot_template(step.partition)
        slots = bytearray(step.slot_template)
        for i, shape in enumerate(shapes):
            if len(shape) > _abi.MAX_NDIMS:
                raise InvalidArgument(f"{step.output_node.name}: input {i} has {len(shape)} dimensions, unicache "
                                      f"takes at most {_abi.MAX_NDIMS}")
            _NDIMS_FIELD.pack_into(slots, i * _SLOT + _NDIMS, len(shape))
            struct.pack_into(f"={len(shape)}q", slots, i * _SLOT + _DIMS, *shape)
        address = C.addressof((C.c_char * len(slots)).from_buffer(slots))  # fixed: slots is never resized
        started = time.perf_counter()
        pointer = self._compile_at(step.partition, shapes, address)
        _report.add_time("partition_compile_ms", (time.perf_counter() - started) * 1e3)
        self._compile_count += 1
        try:
            at = count * _SLOT  # the output's slot: its description written by the library
            _lib.check(self._get_output(pointer, 0, address + at), "unicache_compiled_partition_get_output")
            ndims = _NDIMS_FIELD.unpack_from(slots, at + _NDIMS)[0]
            if not 0 <= ndims <= _abi.MAX_NDIMS:
                raise Error(f"{step.output_node.name}: the library described an output of {ndims} dimensions",
                            what="unicache.torch")
            produced = struct.unpack_from(f"={ndims}q", slots, at + _DIMS)
            known = {s.node: t.shape for s, t in zip(step.sources, tensors) if s.node is not None}
            output_shape = tuple(self._shape_of(step.output_node, known))
            if view_shape(output_shape, step.output_view) != produced:
                raise Error(f"{step.output_node.name}: unicache computes shape {list(produced)} "
                            f"where torch's rules give {list(output_shape)} ({step.output_view} view)",
                            what="unicache.torch")
        except BaseException:
            self._destroy(pointer)
            raise
        return pointer, address, tuple(int(d) for d in output_shape), slots

    def _compile_at(self, partition: Partition, shapes: List[Tuple[int, ...]], address: int) -> int:
        """unicache_compile of `partition`, its input shapes read from the slots at `address`."""
        count = len(shapes)
        ndims = (C.c_int32 * count)(*map(len, shapes))
        rows = (C.c_void_p * count)(*[address + i * _SLOT + _DIMS for i in range(count)])
        handle = C.c_void_p()
        with partition._handle() as p, self._engine._handle() as e:
            status = self._unicache_compile(p, count, ndims, rows, e, C.byref(handle))
        if status:
            raise error_for(status, _lib.last_error(),
                            f"compile partition {partition.index} for {[list(s) for s in shapes]}")
        return handle.value or 0

    def _shape_of(self, node: torch.fx.Node, known: Dict[torch.fx.Node, Any]) -> Tuple[int, ...]:
        """A node's torch shape from the partition's input shapes, by the lowered nodes' rules."""
        if node in known:
            return tuple(known[node])
        rule, args = self._lowered.shape_rules[node]
        return tuple(rule([self._shape_of(a, known) for a in args]))

    def __repr__(self) -> str:
        return (f"<unicache.torch.CompiledModule: {self.partitions} partitions, {len(self.torch_nodes)} torch "
                f"nodes, on {self.device}>")


class _ForwardWriter:
    """Writes a CompiledModule's forward: Python source over its steps, compiled.

    A node becomes a variable; anything else an argument holds (numbers, dtypes,
    torch functions, modules, attributes' tensors) is passed in the function's
    globals as it is, never through its repr. Nodes appear only in tuples, lists,
    dicts and slices of an FX node's arguments (torch.fx normalizes them so)."""

    def __init__(self, root: torch.nn.Module, resolve: Callable[[Any], Any], serial: int) -> None:
        self.root, self.resolve = root, resolve
        self.filename = f"<unicache.torch forward {serial}>"
        self.names: Dict[torch.fx.Node, str] = {}
        self.values: Dict[str, Any] = {}
        self.reads: List[List[str]] = []  # the variables each statement reads

    def write(self, placeholders: List[torch.fx.Node], steps: List[Any], output: Any,
              partition_call: Callable[[PartitionStep], Callable[..., torch.Tensor]]) -> Callable[..., Any]:
        parameters = [self._define(node) for node in placeholders]
        statements: List[Tuple[str, str]] = []  # (the variable set, its expression)
        for step in steps:
            read: List[str] = []
            if isinstance(step, TorchStep):
                call = self._torch_call(step.node, read)
                name = self._define(step.node)
            else:
                function = self._value(partition_call(step))
                args = [self._arg(s.node, read) for s in step.sources if s.node is not None]
                call = f"{function}({', '.join(args)})"
                name = self._define(step.output_node)
            statements.append((name, call))
            self.reads.append(read)
        read = []
        returned = self._arg(output, read)
        self.reads.append(read)
        source = self._source(parameters, statements, returned)
        linecache.cache[self.filename] = (len(source), None, source.splitlines(True), self.filename)
        exec(compile(source, self.filename, "exec"), self.values)
        return self.values["forward"]

    def _source(self, parameters: List[str], statements: List[Tuple[str, str]], returned: str) -> str:
        """The function, each variable set to None after the statement that reads it
        last (a value nothing reads is not kept)."""
        last: Dict[str, int] = {}
        for i, read in enumerate(self.reads):
            for name in read:
                last[name] = i
        lines = [f"def forward({', '.join(parameters)}):"]
        for i, (name, call) in enumerate(statements):
            lines.append(f"    {name} = {call}" if name in last else f"    {call}")
            done = [n for n in dict.fromkeys(self.reads[i]) if last[n] == i]
            if done:
                lines.append("    " + " = ".join(done) + " = None")
        lines.append(f"    return {returned}")
        return "\n".join(lines) + "\n"

    def _define(self, node: torch.fx.Node) -> str:
        name = f"v{len(self.names)}"
        self.names[node] = name
        return name

    def _value(self, value: Any) -> str:
        name = f"k{len(self.values)}"
        self.values[name] = value
        return name

    def _torch_call(self, node: torch.fx.Node, read: List[str]) -> str:
        args = [self._arg(a, read) for a in node.args]
        args += [f"{k}={self._arg(v, read)}" if k.isidentifier() and not keyword.iskeyword(k)
                 else f"**{{{self._value(k)}: {self._arg(v, read)}}}" for k, v in node.kwargs.items()]
        if node.op == "call_function":
            return f"{self._value(node.target)}({', '.join(args)})"
        if node.op == "call_method":
            method = str(node.target)
            bound = f"{args[0]}.{method}" if method.isidentifier() and not keyword.iskeyword(method) else \
                f"getattr({args[0]}, {self._value(method)})"
            return f"{bound}({', '.join(args[1:])})"
        if node.op == "call_module":
            return f"{self._value(attribute(self.root, str(node.target)))}({', '.join(args)})"
        if node.op == "get_attr":
            return self._value(attribute(self.root, str(node.target)))
        raise Error(f"{node.name}: a {node.op} node among torch's steps (unicache.torch bug)", what="unicache.torch")

    def _arg(self, a: Any, read: List[str]) -> str:
        if isinstance(a, torch.fx.Node):
            name = self.names[self.resolve(a)]
            read.append(name)
            return name
        if type(a) is tuple:
            items = [self._arg(x, read) for x in a]
            return f"({', '.join(items)}{',' if len(items) == 1 else ''})"
        if isinstance(a, tuple) and hasattr(a, "_fields"):  # a named tuple
            return f"{self._value(type(a))}({', '.join(self._arg(x, read) for x in a)})"
        if isinstance(a, list):
            return f"[{', '.join(self._arg(x, read) for x in a)}]"
        if isinstance(a, dict):
            return "{" + ", ".join(f"{self._value(k)}: {self._arg(v, read)}" for k, v in a.items()) + "}"
        if isinstance(a, slice):
            return f"slice({self._arg(a.start, read)}, {self._arg(a.stop, read)}, {self._arg(a.step, read)})"
        if a is None or type(a) in (bool, int):
            return repr(a)
        return self._value(a)


def _raw_execute() -> Any:
    """unicache_compiled_partition_execute taking addresses (the slots' bytearrays)."""
    function = _lib.library().cdll["unicache_compiled_partition_execute"]  # a new function object
    function.argtypes = [C.c_void_p, C.c_void_p, C.c_void_p, C.c_size_t, C.c_void_p, C.c_size_t]
    function.restype = C.c_int
    return function


def _raw_compile() -> Tuple[Any, Any]:
    """unicache_compile and unicache_compiled_partition_get_output taking addresses."""
    cdll = _lib.library().cdll
    compile_, get_output = cdll["unicache_compile"], cdll["unicache_compiled_partition_get_output"]  # new objects
    compile_.argtypes = [C.c_void_p, C.c_size_t, C.POINTER(C.c_int32), C.POINTER(C.c_void_p), C.c_void_p,
                         C.POINTER(C.c_void_p)]
    get_output.argtypes = [C.c_void_p, C.c_size_t, C.c_void_p]
    compile_.restype = get_output.restype = C.c_int
    return compile_, get_output


# Compiled partitions a CompiledModule keeps at most (eight per new batch and
# length for BERT's structures): CompiledModule.max_compiled, per module.
MAX_COMPILED = 4096


def _destroy_compiled(compiled: Dict[Tuple[Any, ...], Tuple[int, int, Tuple[int, ...], bytearray]],
                      destroy: Callable[[int], int], engine: Engine) -> None:
    """The module's compiled partitions, destroyed (the engine, kept alive until now, after them)."""
    while compiled:
        destroy(compiled.popitem()[1][0])


def input_specs(placeholders: List[torch.fx.Node], info: Dict[torch.fx.Node, Optional[TensorInfo]],
                feeds: Sequence[bool]) -> List[InputSpec]:
    specs = []
    for node, feeds_unicache in zip(placeholders, feeds):
        ti = info[node]
        if ti is None:
            specs.append(InputSpec(None, None, (), False))
            continue
        dims = tuple(a if a == b else None for a, b in zip(ti.shape, ti.other_shape))
        specs.append(InputSpec(ti.dtype, ti.device, dims, feeds_unicache))
    return specs
