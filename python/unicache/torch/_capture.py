"""Capturing a module: torch.fx's graph of it, and what each node's value is
(shape, dtype) for two sets of inputs that differ in the dynamic dimensions,
so that a dimension computed in the model is known to follow the input.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

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


def _meta(value: Any) -> Any:
    return value.to("meta") if isinstance(value, torch.Tensor) else value


@contextlib.contextmanager
def _on_meta(gm: torch.nn.Module) -> Iterator[None]:
    """The module's parameters and buffers swapped for meta copies meanwhile
    (by hand: torch's helpers for this import dynamo on torch 2, seconds)."""
    swapped = []
    try:
        for module in gm.modules():
            for table in (module._parameters, module._buffers):
                for name, value in list(table.items()):
                    if value is not None:
                        swapped.append((table, name, value))
                        table[name] = value.to("meta")
        yield
    finally:
        for table, name, value in swapped:
            table[name] = value


# torch 1.x computes shapes on the meta device in C++ (BERT-base: 12 ms where a
# CPU run of Debian's torch takes 0.5 s); torch 2 loads its Python meta
# kernels on first use, which took 4.5 s on the GPU host (torch 2.11), where
# a real run takes milliseconds.
_META_IS_FAST = int(torch.__version__.split(".")[0]) < 2


def _run(gm: torch.fx.GraphModule, inputs: Sequence[Any]) -> Dict[torch.fx.Node, Any]:
    """Every node's value: on torch 1.x computed on the meta device where torch
    can (shapes only: nothing runs), else for real."""
    if _META_IS_FAST:
        try:
            recorder = _Recorder(gm)
            with torch.no_grad(), _on_meta(gm):
                recorder.run(*[_meta(t) for t in inputs])
            return recorder.values
        except Exception:  # an op without a meta kernel
            pass
    recorder = _Recorder(gm)
    with torch.no_grad():
        recorder.run(*inputs)
    return recorder.values


def other_inputs(inputs: Sequence[Any], dynamic: Sequence[Sequence[int]], grow: int,
                 sizes: Dict[int, Tuple[int, int]]) -> List[Any]:
    """The inputs with each dynamic dimension `grow` larger (random data: only shapes
    matter), and each size input (sizes: input -> (tensor input, dim)) following it."""
    out: List[Any] = []
    for t, dims in zip(inputs, dynamic):
        if not isinstance(t, torch.Tensor):
            out.append(t)
            continue
        shape = list(t.shape)
        for d in dims:
            shape[d] += grow
        out.append(torch.randn(shape, dtype=t.dtype, device=t.device) if t.is_floating_point()
                   else torch.zeros(shape, dtype=t.dtype, device=t.device))
    for i, (tensor, dim) in sizes.items():
        out[i] = out[tensor].shape[dim]
    return out


def describe(gm: torch.fx.GraphModule, inputs: Sequence[Any], dynamic: Sequence[Sequence[int]],
             sizes: Dict[int, Tuple[int, int]]) -> Dict[torch.fx.Node, Optional[TensorInfo]]:
    """Each node's TensorInfo (None for a value that is not a tensor), from a run on
    `inputs` and one on inputs whose dynamic dimensions are larger."""
    first = _run(gm, inputs)
    second: Optional[Dict[torch.fx.Node, Any]] = None
    failures = []
    for grow in (1, 2, 8):  # a model may need, say, even lengths: try a few
        try:
            second = _run(gm, other_inputs(inputs, dynamic, grow, sizes))
            break
        except Exception as e:  # the model rejects that shape: the next growth may fit
            failures.append(f"+{grow}: {type(e).__name__}: {e}")
    if second is None:
        raise InvalidArgument("the module did not run with its dynamic dimensions changed, so no dimension "
                              "can be shown to follow them (" + "; ".join(failures) + ")",
                              what="unicache.torch.compile")
    devices = {t.device for t in inputs if isinstance(t, torch.Tensor)}
    device = devices.pop() if len(devices) == 1 else None
    info: Dict[torch.fx.Node, Optional[TensorInfo]] = {}
    for node, value in first.items():
        other = second.get(node)
        if isinstance(value, torch.Tensor) and isinstance(other, torch.Tensor):
            where = device if value.device.type == "meta" and device is not None else value.device
            info[node] = TensorInfo(tuple(value.shape), tuple(other.shape), value.dtype, where)
        else:
            info[node] = None
    return info
