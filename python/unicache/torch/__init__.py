"""unicache.torch: a torch.nn.Module's supported ops run through unicache.

    import unicache.torch
    fast = unicache.torch.compile(model.eval(), [example], dynamic_dims={0: (0, 1)})
    y = fast(x)                      # any batch and sequence length: no recompile

compile() traces the module with torch.fx, maps what unicache's graph IR
supports (Linear, matmul, bmm, addmm, Add and Multiply with tensors or
numbers, subtraction and division by a number, negation, ReLU, GELU (and
GELU written out), Sigmoid, Tanh, SiLU, sqrt, rsqrt, pow by 2, 0.5 or -0.5,
Softmax, LayerNorm and RMSNorm (and RMSNorm written out) on the last axis,
scaled dot-product attention, permute and transpose) to one unicache graph,
which unicache partitions and fuses; everything else (views, reshapes,
index arithmetic, dropout in eval mode is dropped, unknown ops) runs in torch
between partitions.
Dimensions named dynamic are -1 in the graph, so a new batch or sequence
length is a compile() lookup, never a rebuild; shapes the model computes
from its inputs (x.size(0), views built from it) follow them.

Parameters are unicache constants: packed once by the constant tensor cache,
and packed again when changed in place (their torch version counts changes).
Devices: the CPU (oneDNN) and CUDA (the device's primary context, shared
with torch; work goes on torch's current stream, and nothing waits until
the caller synchronizes). On torch >= 2 the same is the torch.compile
backend "unicache": torch.compile(model, backend="unicache"), for models
torch.fx cannot trace (see _dynamo). explain() says what runs where and
why; statistics() counts what ran in torch (each cause also warned once).

Errors: TraceFailed when torch.fx cannot trace the module (with FX's
reason); InvalidArgument / InvalidTensorType when a call's inputs do not fit
what was compiled (dtype, device, rank, a static dimension, a non-contiguous
input); every one derives from unicache.Error.
"""
from __future__ import annotations

import sys
from typing import Iterable, List, Mapping, Sequence, Union

import torch
import torch.fx

from ..errors import InvalidArgument, InvalidTensorType
from ._capture import TraceFailed, collector_paused, describe, trace
from ._plan import build, check_inputs, plan
from ._report import FallbackWarning, FrontendStatistics, statistics
from ._runtime import CompiledModule

__all__ = ["compile", "CompiledModule", "TraceFailed", "dynamo_backend", "register_dynamo_backend", "explain",
           "Explanation", "statistics", "FrontendStatistics", "FallbackWarning"]

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
        graph = trace(module)
        check_inputs(graph, inputs)
        return build(plan(module, graph, describe(module, graph, inputs, dynamic, {})))


from ._dynamo import dynamo_backend, register_dynamo_backend  # noqa: E402
from ._explain import Explanation, explain  # noqa: E402

# Registered now if dynamo is loaded already; else register_dynamo_backend()
# does it (importing torch._dynamo takes seconds: not a cost of every import).
if "torch._dynamo" in sys.modules:
    register_dynamo_backend()
