"""unicache.torch: a torch.nn.Module's supported ops run through unicache.

    import unicache.torch
    fast = unicache.torch.compile(model.eval(), [example], dynamic_dims={0: (0, 1)})
    y = fast(x)                      # any batch and sequence length: no recompile

compile() traces the module with torch.fx, maps what unicache's graph IR
supports (Linear, matmul, bmm, addmm, Add and Multiply with tensors or
numbers, division by a number, ReLU, GELU, Sigmoid, Tanh, Softmax on the
last axis, LayerNorm on the last axis, permute and transpose) to one
unicache graph, which unicache partitions and fuses; everything else (views,
reshapes, dropout in eval mode is dropped, unknown ops) runs in torch
between partitions.
Dimensions named dynamic are -1 in the graph, so a new batch or sequence
length is a compile() lookup, never a rebuild; shapes the model computes
from its inputs (x.size(0), views built from it) follow them.

Parameters are unicache constants: packed once by the constant tensor cache,
and packed again when changed in place (their torch version counts changes).
Devices: the CPU (oneDNN) and CUDA (the device's primary context, shared
with torch; work goes on torch's current stream, and nothing waits until
the caller synchronizes). On torch >= 2 the same is the torch.compile
backend "unicache": torch.compile(model, backend="unicache").

Errors: TraceFailed when torch.fx cannot trace the module (with FX's
reason); InvalidArgument / InvalidTensorType when a call's inputs do not fit
what was compiled (dtype, device, rank, a static dimension, a non-contiguous
input); every one derives from unicache.Error.
"""
from __future__ import annotations

import sys
from typing import Any, Dict, Iterable, List, Mapping, Sequence, Tuple, Union

import torch
import torch.fx

from ..engine import Engine
from ..errors import InvalidArgument, InvalidTensorType
from ._capture import TraceFailed, collector_paused, describe, trace
from ._lowering import Lowerer, mutates
from ._runtime import CompiledModule, PartitionStep, TorchStep, input_specs

__all__ = ["compile", "CompiledModule", "TraceFailed", "dynamo_backend", "register_dynamo_backend"]

DynamicDims = Union[None, Mapping[int, Iterable[int]], Sequence[Iterable[int]]]


def _dynamic_dims(dynamic_dims: DynamicDims, inputs: Sequence[torch.Tensor]) -> List[List[int]]:
    """Per input, its dynamic dimensions (None: dimension 0 of every input)."""
    if dynamic_dims is None:
        return [[0] if t.dim() > 0 else [] for t in inputs]
    if isinstance(dynamic_dims, Mapping):
        unknown = [k for k in dynamic_dims if not isinstance(k, int) or not 0 <= k < len(inputs)]
        if unknown:
            raise InvalidArgument(f"dynamic_dims names inputs {unknown}; there are {len(inputs)}")
        per_input = [list(dynamic_dims.get(i, ())) for i in range(len(inputs))]
    else:
        per_input = [list(d) for d in dynamic_dims]
        if len(per_input) != len(inputs):
            raise InvalidArgument(f"dynamic_dims has {len(per_input)} entries for {len(inputs)} inputs")
    out = []
    for i, (t, dims) in enumerate(zip(inputs, per_input)):
        for d in dims:
            if not isinstance(d, int) or not -t.dim() <= d < t.dim():
                raise InvalidArgument(f"dynamic_dims: input {i} has {t.dim()} dimensions, no dimension {d}")
        out.append(sorted({d % t.dim() for d in dims}))
    return out


def _device(inputs: Sequence[torch.Tensor]) -> torch.device:
    devices = {t.device for t in inputs if t.is_floating_point()} or {t.device for t in inputs}
    if len(devices) > 1 and any(d.type == "cuda" for d in devices):
        # A CUDA model with a CPU scalar among its inputs (dynamo lifts some):
        # the CPU ones stay torch's.
        devices = {d for d in devices if d.type == "cuda"}
    if len(devices) != 1:
        raise InvalidTensorType(f"example inputs on several devices: {sorted(str(d) for d in devices)}")
    device = devices.pop()
    if device.type not in ("cpu", "cuda"):
        raise InvalidTensorType(f"device {device}: unicache.torch runs on 'cpu' and 'cuda'")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def compile(module: torch.nn.Module, example_inputs: Sequence[torch.Tensor],
            dynamic_dims: DynamicDims = None) -> CompiledModule:
    """The module with the ops unicache supports running through it.

    `module` is an eval-mode torch.nn.Module (or a torch.fx.GraphModule);
    `example_inputs` one call's positional tensors; `dynamic_dims` each input's
    dimensions that change between calls, as {input index: dims} or one list
    per input (None: dimension 0 of every input). Raises TraceFailed,
    InvalidArgument (a dynamic dimension the module cannot change),
    InvalidTensorType (inputs on several or unsupported devices), or the
    unicache error of building the graph.
    """
    if module.training:
        raise InvalidArgument("the module is in training mode: call module.eval() first (dropout and "
                              "batch statistics differ in training)", what="unicache.torch.compile")
    inputs = list(example_inputs)
    if not all(isinstance(t, torch.Tensor) for t in inputs):
        raise InvalidTensorType("example_inputs: torch tensors, one per positional input")
    dynamic = _dynamic_dims(dynamic_dims, inputs)
    with collector_paused():
        return compile_graph(module, trace(module), inputs, dynamic, {})


def compile_graph(root: torch.nn.Module, graph: torch.fx.Graph, inputs: List[Any], dynamic: List[List[int]],
                  sizes: Dict[int, Tuple[int, int]]) -> CompiledModule:
    """compile() on `root`'s FX graph whose inputs are tensors and, where `sizes` maps an
    input to (tensor input, dimension), integers that are that tensor's size
    (dynamo's symbolic sizes)."""
    with collector_paused():
        return _compile_graph(root, graph, inputs, dynamic, sizes)


def _compile_graph(root: torch.nn.Module, graph: torch.fx.Graph, inputs: List[Any], dynamic: List[List[int]],
                   sizes: Dict[int, Tuple[int, int]]) -> CompiledModule:
    device = _device([t for t in inputs if isinstance(t, torch.Tensor)])
    info = describe(root, graph, inputs, dynamic, sizes)
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(inputs):
        raise InvalidArgument(f"the module takes {len(placeholders)} inputs, example_inputs has {len(inputs)}")
    lowerer = Lowerer(root, graph, info, device)
    torch_nodes, output = [], None
    for node in graph.nodes:
        if node.op == "output":
            output = node.args[0]
        elif node.op != "placeholder" and not lowerer.lower(node):
            torch_nodes.append(node)
    # A transpose every reader of which folded it into a MatMul flag is not run.
    folded = lowerer.out.folded
    live_torch = [n for n in torch_nodes if not (n in folded and set(n.users) <= folded[n])]
    reads = [a for n in live_torch for a in n.all_input_nodes]
    reads += _nodes_in(output)
    lowered = lowerer.finish(reads)
    steps = _steps(root, graph, lowered, live_torch, output)
    feeds = [any(s.node is p for st in steps if isinstance(st, PartitionStep) for s in st.sources)
             for p in placeholders]
    return CompiledModule(root, lowered, steps, placeholders, input_specs(placeholders, info, feeds),
                          output, Engine.for_torch_device(device), device)


def _nodes_in(value: Any) -> List[torch.fx.Node]:
    found: List[torch.fx.Node] = []
    torch.fx.node.map_arg(value, lambda n: found.append(n) or n)
    return found


def _steps(root: torch.nn.Module, graph: torch.fx.Graph, lowered: Any, torch_nodes: List[torch.fx.Node], output: Any) -> List[Any]:
    """Torch steps and partition steps in the FX order, without the ones nothing needs."""
    by_output: Dict[torch.fx.Node, PartitionStep] = {}
    for p in lowered.graph.partitions:
        node = lowered.produced_by.get(p.outputs[0].id)
        if node is None:
            raise InvalidArgument(f"partition {p.index}: its output is not a node's value (unicache.torch bug)")
        by_output[node] = PartitionStep(p, [lowered.source_of(t.id) for t in p.inputs], node,
                                        lowered.produced[node][1])
    torch_set = set(torch_nodes)
    ordered: List[Any] = []
    for node in graph.nodes:
        if node in torch_set:
            ordered.append(TorchStep(node))
        elif node in by_output:
            ordered.append(by_output[node])
    needed = {lowered.resolve(n) for n in _nodes_in(output)}
    kept: List[Any] = []
    for step in reversed(ordered):
        if isinstance(step, TorchStep):
            if step.node not in needed and not mutates(root, step.node):
                continue
            needed.update(lowered.resolve(n) for n in step.node.all_input_nodes)
        else:
            if step.output_node not in needed:
                continue
            needed.update(s.node for s in step.sources if s.node is not None)
        kept.append(step)
    return kept[::-1]


from ._dynamo import dynamo_backend, register_dynamo_backend  # noqa: E402

# Registered now if dynamo is loaded already; else register_dynamo_backend()
# does it (importing torch._dynamo takes seconds: not a cost of every import).
if "torch._dynamo" in sys.modules:
    register_dynamo_backend()
