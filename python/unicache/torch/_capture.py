"""Capturing a module: torch.fx's graph of it, and what each node's value is
(shape, dtype) for two sets of inputs that differ in the dynamic dimensions,
so that a dimension computed in the model is known to follow the input.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.fx

from ..errors import Error, InvalidArgument

Shape = Tuple[int, ...]


class TraceFailed(Error, RuntimeError):
    """torch.fx could not trace the module; the message carries FX's reason."""


@dataclass(frozen=True)
class TensorInfo:
    """A node's tensor value as two runs saw it: its shape in each, its dtype and device."""

    shape: Shape
    other_shape: Shape
    dtype: torch.dtype
    device: torch.device

    @property
    def rank(self) -> int:
        return len(self.shape)


def trace(module: torch.nn.Module) -> torch.fx.GraphModule:
    """The module's FX graph (a GraphModule is taken as it is)."""
    if isinstance(module, torch.fx.GraphModule):
        return module
    try:
        return torch.fx.symbolic_trace(module)
    except Exception as e:  # FX raises TraceError, TypeError, NotImplementedError...
        raise TraceFailed(f"torch.fx could not trace {type(module).__name__}: {type(e).__name__}: {e}. "
                          "Make the module traceable (no control flow on tensor values, no iterating "
                          "over a tensor's size), or on torch >= 2 use torch.compile(module, "
                          "backend=\"unicache\")", what="unicache.torch.compile") from e


class _Recorder(torch.fx.Interpreter):
    """Runs the graph and keeps every node's result."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        super().__init__(gm)
        self.values: Dict[torch.fx.Node, Any] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        result = super().run_node(n)
        self.values[n] = result
        return result


def _run(gm: torch.fx.GraphModule, inputs: Sequence[torch.Tensor]) -> Dict[torch.fx.Node, Any]:
    recorder = _Recorder(gm)
    with torch.no_grad():
        recorder.run(*inputs)
    return recorder.values


def other_inputs(inputs: Sequence[torch.Tensor], dynamic: Sequence[Sequence[int]], grow: int) -> List[torch.Tensor]:
    """The inputs with each dynamic dimension `grow` larger (random data: only shapes matter)."""
    out = []
    for t, dims in zip(inputs, dynamic):
        shape = list(t.shape)
        for d in dims:
            shape[d] += grow
        out.append(torch.randn(shape, dtype=t.dtype, device=t.device) if t.is_floating_point()
                   else torch.zeros(shape, dtype=t.dtype, device=t.device))
    return out


def describe(gm: torch.fx.GraphModule, inputs: Sequence[torch.Tensor],
             dynamic: Sequence[Sequence[int]]) -> Dict[torch.fx.Node, Optional[TensorInfo]]:
    """Each node's TensorInfo (None for a value that is not a tensor), from a run on
    `inputs` and one on inputs whose dynamic dimensions are larger."""
    first = _run(gm, inputs)
    second: Optional[Dict[torch.fx.Node, Any]] = None
    failures = []
    for grow in (1, 2, 8):  # a model may need, say, even lengths: try a few
        try:
            second = _run(gm, other_inputs(inputs, dynamic, grow))
            break
        except Exception as e:  # the model rejects that shape: the next growth may fit
            failures.append(f"+{grow}: {type(e).__name__}: {e}")
    if second is None:
        raise InvalidArgument("the module did not run with its dynamic dimensions changed, so no dimension "
                              "can be shown to follow them (" + "; ".join(failures) + ")",
                              what="unicache.torch.compile")
    info: Dict[torch.fx.Node, Optional[TensorInfo]] = {}
    for node, value in first.items():
        other = second.get(node)
        if isinstance(value, torch.Tensor) and isinstance(other, torch.Tensor):
            info[node] = TensorInfo(tuple(value.shape), tuple(other.shape), value.dtype, value.device)
        else:
            info[node] = None
    return info
