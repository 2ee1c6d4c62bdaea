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

import itertools
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.fx

from .. import _abi, _lib
from ..compiled import CompiledPartition
from ..engine import Engine, Stream
from ..errors import Error, InvalidArgument, InvalidTensorType, error_for
from ..graph import Partition
from ._capture import TensorInfo
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

    def __post_init__(self) -> None:
        self.views = tuple(s.view for s in self.sources) + (self.output_view,)


@dataclass
class _Compiled:
    """A partition structure compiled for one set of input shapes, shared by every
    step of that structure and those shapes: the C tensor descriptions (a step sets
    the data pointers just before its call) and the output's torch shape."""

    compiled: CompiledPartition
    pointer: int
    inputs: Any   # TensorStruct array
    outputs: Any
    output_shape: Tuple[int, ...]


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

    def __init__(self, gm: torch.fx.GraphModule, lowered: Lowered, steps: List[Any],
                 placeholders: List[torch.fx.Node], specs: List[InputSpec], output: Any, engine: Engine,
                 device: torch.device) -> None:
        super().__init__()
        self.graph_module = gm  # keeps the parameters (the constants' storage) registered and alive
        self._lowered, self._steps, self._placeholders = lowered, steps, placeholders
        self._specs, self._output, self._engine, self.device = specs, output, engine, device
        # Compiled partitions by (structure, input shapes, views): the layers of a
        # model repeat a few structures, so a new shape compiles each once.
        self._compiled: Dict[Tuple[Any, ...], _Compiled] = {}
        self._signatures: set = set()
        self._streams: Dict[int, Stream] = {}
        self._stream = 0
        self._execute = _lib.function("unicache_compiled_partition_execute")
        self._runner = self._generate_forward(gm)
        self._lock = threading.Lock()
        # Versions are this module's serial and the tensor's torch version: a
        # weight at an address another (freed) module's weight had is not
        # taken for it.
        self._version_base = next(_serials) << 40

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
        repeated layer shares its compilation)."""
        return len(self._compiled)

    @property
    def signatures(self) -> int:
        """How many input shape signatures have been seen."""
        return len(self._signatures)

    # --- Running -------------------------------------------------------------

    def _generate_forward(self, gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
        """The steps as one FX graph whose Python code torch.fx generates: torch's
        nodes as they were, each partition one call; no interpreter between them."""
        graph = torch.fx.Graph()
        env: Dict[torch.fx.Node, torch.fx.Node] = {}
        resolve = self._lowered.resolve
        for node in self._placeholders:
            env[node] = graph.placeholder(node.name)
        for step in self._steps:
            if isinstance(step, TorchStep):
                env[step.node] = graph.node_copy(step.node, lambda n: env[resolve(n)])
            else:
                args = tuple(env[s.node] for s in step.sources if s.node is not None)
                env[step.output_node] = graph.call_function(self._partition_call(step), args)
        graph.output(torch.fx.node.map_arg(self._output, lambda n: env[resolve(n)]))
        return torch.fx.GraphModule(gm, graph)

    def _partition_call(self, step: PartitionStep) -> Callable[..., torch.Tensor]:
        sources = step.sources
        run = self._run_partition

        def unicache_partition(*tensors: torch.Tensor) -> torch.Tensor:
            found = iter(tensors)
            return run(step, [s.current() if s.node is None else next(found) for s in sources])
        unicache_partition.__name__ = unicache_partition.__qualname__ = f"unicache_{step.output_node.name}"
        return unicache_partition

    def forward(self, *inputs: Any) -> Any:
        self._check(inputs)
        with self._lock:  # the C descriptions and the stream are shared by calls
            self._signatures.add(tuple(t.shape if isinstance(t, torch.Tensor) else t for t in inputs))
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

    def _run_partition(self, step: PartitionStep, tensors: List[torch.Tensor]) -> torch.Tensor:
        for i, t in enumerate(tensors):
            source = step.sources[i]
            if source.node is None:
                if t.device != self.device or t.dtype != torch.float32 or not t.is_contiguous():
                    raise InvalidTensorType(f"parameter {source.attribute or 'constant'} is now {t.dtype} on "
                                            f"{t.device}{'' if t.is_contiguous() else ', not contiguous'}; the "
                                            f"module was compiled for contiguous float32 on {self.device}: "
                                            "compile again")
                continue
            if not t.is_contiguous():
                tensors[i] = t = t.contiguous()
            if t.dtype != torch.float32:
                raise InvalidTensorType(f"{source.node}: torch made a {t.dtype} tensor where unicache reads f32")
        key = (step.partition.fingerprint, step.views, tuple(t.shape for t in tensors))
        c = self._compiled.get(key)
        if c is None:
            c = self._compiled[key] = self._compile(step, tensors)
        out = torch.empty(c.output_shape, dtype=torch.float32, device=self.device)
        inputs = c.inputs
        for i, t in enumerate(tensors):
            inputs[i].data = t.data_ptr()
            inputs[i].version = self._version_base | t._version
        c.outputs[0].data = out.data_ptr()
        status = self._execute(c.pointer, self._stream, inputs, len(tensors), c.outputs, 1)
        if status:
            raise error_for(status, _lib.last_error(), f"executing the partition of {step.output_node.name}")
        return out

    def _compile(self, step: PartitionStep, tensors: List[torch.Tensor]) -> _Compiled:
        shapes = [tuple(t.shape) if s.node is None else view_shape(t.shape, s.view)
                  for t, s in zip(tensors, step.sources)]
        compiled = step.partition.compile(shapes, self._engine)
        known = {s.node: t.shape for s, t in zip(step.sources, tensors) if s.node is not None}
        output_shape = tuple(self._shape_of(step.output_node, known))
        if view_shape(output_shape, step.output_view) != tuple(compiled.outputs[0].shape):
            raise Error(f"{step.output_node.name}: unicache computes shape {list(compiled.outputs[0].shape)} "
                        f"where torch's rules give {list(output_shape)} ({step.output_view} view)",
                        what="unicache.torch")
        ins = (_abi.TensorStruct * len(tensors))()
        for i, t in enumerate(compiled.inputs):
            ins[i].desc = t._to_struct()
        outs = (_abi.TensorStruct * 1)()
        outs[0].desc = compiled.outputs[0]._to_struct()
        # The C handle lives as long as _compiled holds the compiled partition.
        return _Compiled(compiled, compiled._handle().pointer, ins, outs, output_shape)

    def _shape_of(self, node: torch.fx.Node, known: Dict[torch.fx.Node, Any]) -> Tuple[int, ...]:
        """A node's torch shape from the partition's input shapes, by the lowered nodes' rules."""
        if node in known:
            return tuple(known[node])
        rule, args = self._lowered.shape_rules[node]
        return tuple(rule([self._shape_of(a, known) for a in args]))

    def __repr__(self) -> str:
        return (f"<unicache.torch.CompiledModule: {self.partitions} partitions, {len(self.torch_nodes)} torch "
                f"nodes, on {self.device}>")


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
