"""Lowering: which FX nodes become unicache ops, and the one unicache graph
they form.

Every FX value that unicache reads or writes is a unicache tensor seen
through a view of its torch shape:
  plain  the torch shape itself;
  rows   every dimension but the last flattened ([B, S, H] -> [B*S, H]): what
         Linear, LayerNorm, Softmax and eltwise ops need, since each row is
         independent;
  batch  every dimension but the last two flattened ([B, h, S, d] ->
         [B*h, S, d]): a batched MatMul's operands, rank 3 as the IR takes it.
A contiguous tensor has the same bytes under every view, so a view costs
nothing at run time. Where a value made by unicache is read under another
view, or by torch, it becomes a partition's output (Graph.mark_output).
Dimensions that differ between the two capture runs are -1.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

import torch
import torch.fx
import torch.nn.functional as F

from ..graph import Graph, LogicalTensor, OpAttr, OpKind
from ._capture import LINEAR_FUNCTIONS, MATMUL_FUNCTIONS, Shape, TensorInfo, attribute, broadcast
from ._decompose import attention as _ATTENTION
from ._decompose import rms_norm as _RMS_NORM

PLAIN, ROWS, BATCH = "plain", "rows", "batch"
MAX_TRANSPOSE_RANK = 6  # the IR's Transpose
ShapeFn = Callable[[List[Shape]], Shape]


def view_shape(shape: Sequence[int], view: str) -> Shape:
    """`shape` under `view` (see the module's docstring)."""
    shape = tuple(shape)
    if view == ROWS and len(shape) > 2:
        return (math.prod(shape[:-1]), shape[-1])
    if view == BATCH and len(shape) > 3:
        return (math.prod(shape[:-2]),) + shape[-2:]
    return shape


def canonical(view: str, rank: int) -> str:
    """The view's name, PLAIN where it changes nothing at this rank."""
    if (view == ROWS and rank <= 2) or (view == BATCH and rank <= 3):
        return PLAIN
    return view


@dataclass
class Source:
    """Where a unicache tensor's data comes from at run time: an FX node's value
    (seen through `view`), or a constant tensor (a parameter, or a scalar made here)."""

    node: Optional[torch.fx.Node]
    view: str = PLAIN
    constant: Optional[torch.Tensor] = None
    # A parameter or buffer: its owner module and attribute, read at every call,
    # so a parameter replaced since compile() is the one used.
    owner: Optional[torch.nn.Module] = None
    attribute: str = ""

    def current(self) -> torch.Tensor:
        """The constant's tensor now."""
        if self.owner is not None:
            return getattr(self.owner, self.attribute)
        assert self.constant is not None
        return self.constant


@dataclass
class Lowered:
    """What lowering made: the graph, each tensor's source, each node's unicache
    value, and the shape rules of the nodes unicache computes."""

    graph: Graph
    sources: Dict[int, Source] = field(default_factory=dict)         # tensor id -> source
    produced: Dict[torch.fx.Node, Tuple[LogicalTensor, str]] = field(default_factory=dict)
    produced_by: Dict[int, torch.fx.Node] = field(default_factory=dict)  # tensor id -> node
    shape_rules: Dict[torch.fx.Node, Tuple[ShapeFn, List[torch.fx.Node]]] = field(default_factory=dict)
    aliases: Dict[torch.fx.Node, torch.fx.Node] = field(default_factory=dict)  # identity nodes
    # transposes read through a MatMul's flag -> the MatMuls that read them so
    folded: Dict[torch.fx.Node, Set[torch.fx.Node]] = field(default_factory=dict)
    reasons: Dict[torch.fx.Node, str] = field(default_factory=dict)  # why a node stayed torch's

    def source_of(self, tensor_id: int) -> Source:
        """Where a partition input comes from: a declared source, or another
        partition's output (the node whose value it is)."""
        if tensor_id in self.sources:
            return self.sources[tensor_id]
        node = self.produced_by[tensor_id]
        return Source(node, self.produced[node][1])

    def resolve(self, node: Any) -> Any:
        while isinstance(node, torch.fx.Node) and node in self.aliases:
            node = self.aliases[node]
        return node


_ELTWISE_FUNCTIONS = {F.relu: OpKind.RELU, torch.relu: OpKind.RELU, torch.sigmoid: OpKind.SIGMOID,
                      torch.tanh: OpKind.TANH, F.sigmoid: OpKind.SIGMOID, F.tanh: OpKind.TANH, torch.sqrt: OpKind.SQRT,
                      torch.rsqrt: OpKind.RSQRT, F.silu: OpKind.SILU,
                      getattr(torch._C._nn, "silu", F.silu): OpKind.SILU}
_ELTWISE_METHODS = {"relu": OpKind.RELU, "sigmoid": OpKind.SIGMOID, "tanh": OpKind.TANH, "sqrt": OpKind.SQRT,
                    "rsqrt": OpKind.RSQRT}
_ELTWISE_MODULES = {torch.nn.ReLU: OpKind.RELU, torch.nn.Sigmoid: OpKind.SIGMOID, torch.nn.Tanh: OpKind.TANH,
                    torch.nn.SiLU: OpKind.SILU}
# pow(x, p) for the exponents that are one op (2: x * x, handled apart).
_POWERS = {0.5: OpKind.SQRT, -0.5: OpKind.RSQRT}
_BINARY = {operator.add: "add", torch.add: "add", operator.mul: "mul", torch.mul: "mul",
           operator.truediv: "div", torch.div: "div"}
_BINARY_METHODS = {"add": "add", "mul": "mul", "div": "div"}
# Ops that only view, copy or index (torch's: no arithmetic to move), for explain()'s reasons.
VIEW_OPS = {"view", "reshape", "size", "getitem", "expand", "expand_as", "unsqueeze", "squeeze", "flatten",
            "unflatten", "contiguous", "transpose", "permute", "split", "chunk", "narrow", "select", "t", "embedding",
            "cat", "stack", "to", "float", "type_as", "clone", "detach", "repeat", "view_as", "reshape_as", "arange",
            "zeros", "ones", "full", "sym_size", "index_select", "gather", "slice", "__getitem__", "new_ones",
            "new_zeros", "zeros_like", "ones_like", "masked_fill", "where", "long", "int", "bool"}


def op_name(node: torch.fx.Node, modules: Optional[Dict[str, torch.nn.Module]] = None) -> str:
    """A node's op as a reader knows it: linear, matmul, view, Linear (a module)."""
    if node.op == "call_module":
        module = (modules or {}).get(str(node.target))
        return type(module).__name__ if module is not None else str(node.target)
    if node.op == "call_function":
        name = getattr(node.target, "__name__", str(node.target))
        return {"getitem": "getitem", "truediv": "div"}.get(name, name)
    return str(node.target)


class Lowerer:
    """Walks the FX graph once, in order, turning what the IR supports into ops."""

    def __init__(self, root: torch.nn.Module, graph: torch.fx.Graph, info: Dict[torch.fx.Node, Optional[TensorInfo]],
                 device: torch.device) -> None:
        self.root, self.info, self.device = root, info, device
        self.modules = dict(root.named_modules())
        self.out = Lowered(Graph())
        self._inputs: Dict[Tuple[torch.fx.Node, str], LogicalTensor] = {}
        self._constants: Dict[int, LogicalTensor] = {}
        self._read_outside: Set[int] = set()
        self._why = ""  # why the node being lowered was refused (see _no)
        # Whether anything changes a value in place: then a permute stays a
        # torch view, which passes such writes on (unicache's copy would not).
        self._mutating = any(mutates(root, n) for n in graph.nodes)
        # Each parameter's and buffer's owner and attribute (read again per call).
        self._owners: Dict[int, Tuple[torch.nn.Module, str]] = {}
        for module in root.modules():
            for table in (module._parameters, module._buffers):
                for name, value in table.items():
                    if value is not None:
                        self._owners.setdefault(id(value), (module, name))

    # --- Tensors -------------------------------------------------------------

    def _f32(self, node: Any) -> Optional[TensorInfo]:
        """The node's TensorInfo if it is an f32 tensor on the compile device."""
        node = self.out.resolve(node)
        if not isinstance(node, torch.fx.Node):
            return None
        ti = self.info.get(node)
        if ti is None or ti.dtype != torch.float32 or ti.device != self.device or ti.rank == 0 or ti.rank > 8:
            return None
        return ti

    def _dims(self, ti: TensorInfo, view: str) -> Tuple[int, ...]:
        a, b = view_shape(ti.shape, view), view_shape(ti.other_shape, view)
        return tuple(x if x == y else -1 for x, y in zip(a, b))

    def _use(self, node: torch.fx.Node, view: str) -> LogicalTensor:
        """The unicache tensor of `node`'s value under `view`."""
        node = self.out.resolve(node)
        ti = self.info[node]
        assert ti is not None
        view = canonical(view, ti.rank)
        made = self.out.produced.get(node)
        if made is not None:
            tensor, made_view = made
            if made_view == view:
                return tensor
            self._read_outside.add(tensor.id)  # re-read under another view: materialized
        key = (node, view)
        if key not in self._inputs:
            t = self.out.graph.add_tensor(self._dims(ti, view))
            self._inputs[key] = t
            self.out.sources[t.id] = Source(node, view)
        return self._inputs[key]

    def _constant(self, value: torch.Tensor) -> LogicalTensor:
        """A constant tensor (a parameter: its version counts its changes)."""
        key = id(value)
        if key not in self._constants:
            t = self.out.graph.add_tensor(tuple(value.shape), constant=True)
            self._constants[key] = t
            owner, attribute = self._owners.get(key, (None, ""))
            self.out.sources[t.id] = Source(None, PLAIN, None if owner is not None else value, owner, attribute)
        return self._constants[key]

    def _scalar(self, value: float) -> LogicalTensor:
        return self._constant(torch.tensor([float(value)], dtype=torch.float32, device=self.device))

    def _parameter(self, value: Any) -> Optional[torch.Tensor]:
        """`value` if it is an f32 tensor on the compile device (a usable constant), else None."""
        # Contiguous: a copy made per call would be a new tensor (new address,
        # version 0) each time, which versioned constants cannot follow.
        ok = isinstance(value, torch.Tensor) and value.dtype == torch.float32 and value.device == self.device \
            and value.is_contiguous()
        return value if ok else None

    def _attr(self, node: torch.fx.Node) -> Optional[torch.Tensor]:
        if node.op != "get_attr":
            return None
        return self._parameter(attribute(self.root, str(node.target)))

    def _output(self, node: torch.fx.Node, view: str, rule: ShapeFn, args: List[torch.fx.Node]) -> LogicalTensor:
        ti = self.info[node]
        assert ti is not None
        view = canonical(view, ti.rank)
        t = self.out.graph.add_tensor(self._dims(ti, view))
        self.out.produced[node] = (t, view)
        self.out.produced_by[t.id] = node
        self.out.shape_rules[node] = (rule, args)
        return t

    def _temporary(self, node: torch.fx.Node, view: str) -> LogicalTensor:
        """A tensor inside a node's lowering (a MatMul's result before its bias)."""
        ti = self.info[node]
        assert ti is not None
        return self.out.graph.add_tensor(self._dims(ti, canonical(view, ti.rank)))

    def _view_of(self, node: torch.fx.Node) -> str:
        """The view a row-wise op reads `node` in: the one unicache made it in, else rows."""
        made = self.out.produced.get(self.out.resolve(node))
        return made[1] if made else ROWS

    # --- Ops -----------------------------------------------------------------

    def lower(self, node: torch.fx.Node) -> bool:
        """Lowers `node` if the IR supports it; False leaves it to torch (the reason in
        Lowered.reasons)."""
        self._why = ""
        if node.op == "call_module":
            done = self._module(node, self.modules[str(node.target)])
        elif node.op == "call_function":
            done = self._function(node)
        elif node.op == "call_method":
            done = self._method(node)
        else:
            done = False
        if not done:
            self.out.reasons[node] = self._why or self._default_reason(node)
        return done

    def _no(self, why: str) -> bool:
        """Refuses the node being lowered, saying why (the first reason given stands)."""
        if not self._why:
            self._why = why
        return False

    def _default_reason(self, node: torch.fx.Node) -> str:
        ti = self.info.get(node)
        name = op_name(node, self.modules)
        if node.op == "get_attr":
            return "an attribute (read by torch)"
        if ti is None:
            return f"{name}: not a tensor (size arithmetic)"
        if ti.dtype != torch.float32:
            return f"{name}: its value is {str(ti.dtype).replace('torch.', '')}; unicache computes float32"
        if ti.device != self.device:
            return f"{name}: its value is on {ti.device}, the graph computes on {self.device}"
        if name in VIEW_OPS:
            return f"{name}: a view or a copy of torch's (no arithmetic)"
        if name in ("attention_bias", "additive_mask"):
            return f"{name}: the attention mask as an additive bias (index arithmetic, torch's)"
        inputs = [a for a in node.all_input_nodes if self.info.get(self.out.resolve(a)) is not None]
        for a in inputs:
            ai = self.info[self.out.resolve(a)]
            if ai is not None and ai.dtype != torch.float32 and ai.dtype.is_floating_point:
                return f"{name}: reads a {str(ai.dtype).replace('torch.', '')} tensor; unicache computes float32"
        return f"{name}: no unicache op for it in this form"

    def _module(self, node: torch.fx.Node, m: torch.nn.Module) -> bool:
        if getattr(m, "inplace", False):
            return False  # it changes its input, which torch's later readers see: torch's
        if isinstance(m, (torch.nn.Dropout, torch.nn.Identity)) and not m.training and len(node.args) == 1:
            return self._alias(node, node.args[0])
        if len(node.args) != 1 or node.kwargs:
            return False
        x = node.args[0]
        if isinstance(m, torch.nn.Linear):
            return self._linear(node, x, self._parameter(m.weight),
                                None if m.bias is None else self._parameter(m.bias), m.bias is not None)
        if isinstance(m, torch.nn.LayerNorm):
            return self._layer_norm(node, x, tuple(m.normalized_shape), m.weight, m.bias, m.eps)
        if type(m) in _ELTWISE_MODULES:
            return self._eltwise(node, x, _ELTWISE_MODULES[type(m)])
        if isinstance(m, torch.nn.GELU):
            return self._gelu(node, x, getattr(m, "approximate", "none"))
        if isinstance(m, torch.nn.Softmax):
            return self._softmax(node, x, m.dim)
        return False

    def _function(self, node: torch.fx.Node) -> bool:
        f, args, kwargs = node.target, node.args, dict(node.kwargs)
        if f is F.dropout:
            training = kwargs.get("training", args[2] if len(args) > 2 else True)
            return training is False and self._alias(node, args[0])
        if f in _ELTWISE_FUNCTIONS and len(args) == 1 and kwargs in ({}, {"inplace": False}):
            return self._eltwise(node, args[0], _ELTWISE_FUNCTIONS[f])
        if f in (torch.pow, operator.pow) and len(args) == 2 and not kwargs:
            return self._pow(node, args[0], args[1])
        if f in (operator.neg, torch.neg) and len(args) == 1 and not kwargs:
            return self._binary(node, "mul", args[0], -1.0)
        if f in (operator.sub, torch.sub) and len(args) == 2 and not kwargs:
            return self._subtract(node, args[0], args[1])
        if f is _ATTENTION and len(args) == 7 and not kwargs:
            return self._attention(node, *args)
        if f is _RMS_NORM or f is getattr(F, "rms_norm", None):
            return self._rms_norm(node, args, kwargs)
        if f is F.gelu and len(args) == 1 and set(kwargs) <= {"approximate"}:
            return self._gelu(node, args[0], kwargs.get("approximate", "none"))
        if f in (F.softmax, torch.softmax) and kwargs.get("dtype") is None:
            dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
            return self._softmax(node, args[0], dim)
        if f is F.layer_norm:
            return self._functional_layer_norm(node, args, kwargs)
        if f in LINEAR_FUNCTIONS and not kwargs and len(args) in (2, 3):
            w = self._attr(args[1]) if isinstance(args[1], torch.fx.Node) else None
            b = args[2] if len(args) == 3 else None
            bias = self._attr(b) if isinstance(b, torch.fx.Node) else None
            return self._linear(node, args[0], w, bias, b is not None)
        if f in MATMUL_FUNCTIONS and len(args) == 2 and not kwargs:
            return self._matmul(node, args[0], args[1], batched_only=f is torch.bmm)
        if f is torch.addmm and len(args) == 3 and all(kwargs.get(k, 1) == 1 for k in kwargs) \
                and set(kwargs) <= {"beta", "alpha"}:
            return self._addmm(node, *args)
        if f in _BINARY and len(args) == 2 and not kwargs:
            return self._binary(node, _BINARY[f], args[0], args[1])
        if f is torch.permute and len(args) == 2 and not kwargs:
            return self._permute(node, args[0], args[1:])
        if f is torch.transpose and len(args) == 3 and not kwargs:
            return self._swap(node, args[0], args[1], args[2])
        return False

    def _method(self, node: torch.fx.Node) -> bool:
        name, args, kwargs = node.target, node.args, dict(node.kwargs)
        if name == "contiguous" and len(args) == 1 and not kwargs and self.out.resolve(args[0]) in self.out.produced:
            return self._alias(node, args[0])  # unicache's outputs are contiguous
        if name in ("to", "float", "type_as", "type") and self._same_value(node, args[0]):
            return self._alias(node, args[0])  # a conversion to what it is already: the same tensor
        if name in _ELTWISE_METHODS and len(args) == 1 and not kwargs:
            return self._eltwise(node, args[0], _ELTWISE_METHODS[name])
        if name == "pow" and len(args) == 2 and not kwargs:
            return self._pow(node, args[0], args[1])
        if name == "neg" and len(args) == 1 and not kwargs:
            return self._binary(node, "mul", args[0], -1.0)
        if name == "sub" and len(args) == 2 and not kwargs:
            return self._subtract(node, args[0], args[1])
        if name == "softmax" and kwargs.get("dtype") is None:
            return self._softmax(node, args[0], kwargs.get("dim", args[1] if len(args) > 1 else None))
        if name == "matmul" and len(args) == 2 and not kwargs:
            return self._matmul(node, args[0], args[1], batched_only=False)
        if name in _BINARY_METHODS and len(args) == 2 and not kwargs:
            return self._binary(node, _BINARY_METHODS[name], args[0], args[1])
        if name == "permute" and len(args) >= 2 and not kwargs:
            return self._permute(node, args[0], args[1:])
        if name == "transpose" and len(args) == 3 and not kwargs:
            return self._swap(node, args[0], args[1], args[2])
        return False

    def _alias(self, node: torch.fx.Node, source: Any) -> bool:
        if not isinstance(source, torch.fx.Node):
            return False
        self.out.aliases[node] = self.out.resolve(source)
        return True

    def _eltwise(self, node: torch.fx.Node, x: Any, kind: OpKind) -> bool:
        if self._f32(x) is None or self._f32(node) is None:
            return False
        view = self._view_of(x)
        xt = self._use(x, view)
        self.out.graph.add_op(kind, [xt], [self._output(node, view, _same, [self.out.resolve(x)])])
        return True

    def _pow(self, node: torch.fx.Node, x: Any, exponent: Any) -> bool:
        """x ** p for p = 1 (x), 2 (x * x), 0.5 (Sqrt), -0.5 (Rsqrt); other exponents stay torch's."""
        if isinstance(exponent, bool) or not isinstance(exponent, (int, float)):
            return self._no("pow: an exponent that is not a number")
        if exponent == 1:
            return self._f32(x) is not None and self._alias(node, x)
        if exponent == 2:
            return self._binary(node, "mul", x, x)
        if exponent in _POWERS:
            return self._eltwise(node, x, _POWERS[exponent])
        return self._no(f"pow: exponent {exponent} (unicache takes 1, 2, 0.5 and -0.5)")

    def _subtract(self, node: torch.fx.Node, x: Any, y: Any) -> bool:
        """x - number as an Add of -number; a tensor minus a tensor stays torch's."""
        if isinstance(y, (int, float)) and not isinstance(y, bool):
            return self._binary(node, "add", x, -y)
        return self._no("sub: a tensor minus a tensor, or a number minus a tensor")

    def _rms_norm(self, node: torch.fx.Node, args: Sequence[Any], kwargs: Dict[str, Any]) -> bool:
        """RMSNorm over the last axis: _decompose.rms_norm(x, weight, eps) (a model's
        RMSNorm written out, rewritten) or F.rms_norm(x, shape, weight, eps)."""
        if node.target is _RMS_NORM:
            x, weight, eps = args
        else:
            values = dict(zip(["input", "normalized_shape", "weight", "eps"], args))
            values.update(kwargs)
            x, weight, eps = values.get("input"), values.get("weight"), values.get("eps")
            shape = values.get("normalized_shape")
            ti = self._f32(x)
            if ti is None or tuple(shape if isinstance(shape, (list, tuple)) else (shape,)) != ti.shape[-1:]:
                return self._no("rms_norm: over more than the last axis")
        ti = self._f32(x)
        if ti is None or self._f32(node) is None:
            return False
        if eps is None:
            eps = torch.finfo(torch.float32).eps  # F.rms_norm's default
        if not isinstance(eps, (int, float)) or isinstance(eps, bool):
            return self._no("rms_norm: an epsilon computed in the model")
        channels = ti.shape[-1]
        gamma = torch.ones(channels, dtype=torch.float32, device=self.device) if weight is None else \
            (self._attr(weight) if isinstance(weight, torch.fx.Node) else None)
        if gamma is None or tuple(gamma.shape) != (channels,):
            return self._no("rms_norm: a weight that is not a float32 parameter of the row's length")
        view = self._view_of(x)
        op = self.out.graph.add_op(OpKind.RMS_NORM, [self._use(x, view), self._constant(gamma)],
                                   [self._output(node, view, _same, [self.out.resolve(x)])])
        self.out.graph.set_op_attr(op, OpAttr.EPSILON, float(eps))
        return True

    def _gelu(self, node: torch.fx.Node, x: Any, approximate: str) -> bool:
        kinds = {"none": OpKind.GELU_ERF, "tanh": OpKind.GELU_TANH}
        return approximate in kinds and self._eltwise(node, x, kinds[approximate])

    def _softmax(self, node: torch.fx.Node, x: Any, dim: Any) -> bool:
        ti = self._f32(x)
        if ti is None or not isinstance(dim, int) or dim not in (-1, ti.rank - 1):
            return False
        return self._eltwise(node, x, OpKind.SOFTMAX)

    def _functional_layer_norm(self, node: torch.fx.Node, args: Sequence[Any], kwargs: Dict[str, Any]) -> bool:
        names = ["input", "normalized_shape", "weight", "bias", "eps"]
        values = dict(zip(names, args))
        values.update(kwargs)
        if set(values) - set(names) or "input" not in values or "normalized_shape" not in values:
            return False
        weight, bias = values.get("weight"), values.get("bias")
        w = self._attr(weight) if isinstance(weight, torch.fx.Node) else None
        b = self._attr(bias) if isinstance(bias, torch.fx.Node) else None
        if (weight is not None and w is None) or (bias is not None and b is None):
            return False  # parameters computed in the model: torch's
        shape = values["normalized_shape"]
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        return self._layer_norm(node, values["input"], shape, w, b, values.get("eps", 1e-5))

    def _layer_norm(self, node: torch.fx.Node, x: Any, normalized: Tuple[int, ...], weight: Optional[torch.Tensor],
                    bias: Optional[torch.Tensor], eps: Any) -> bool:
        ti = self._f32(x)
        if ti is None or len(normalized) != 1 or normalized[0] != ti.shape[-1] or not isinstance(eps, (int, float)):
            return False
        channels = normalized[0]
        ones = torch.ones(channels, dtype=torch.float32, device=self.device)
        zeros = torch.zeros(channels, dtype=torch.float32, device=self.device)
        gamma = self._parameter(weight) if weight is not None else ones
        beta = self._parameter(bias) if bias is not None else zeros
        if gamma is None or beta is None or gamma.shape != (channels,) or beta.shape != (channels,):
            return False
        view = self._view_of(x)
        ins = [self._use(x, view), self._constant(gamma), self._constant(beta)]
        op = self.out.graph.add_op(OpKind.LAYER_NORM, ins, [self._output(node, view, _same, [self.out.resolve(x)])])
        self.out.graph.set_op_attr(op, OpAttr.EPSILON, float(eps))
        return True

    def _permute(self, node: torch.fx.Node, x: Any, dims: Sequence[Any]) -> bool:
        """torch.permute as a Transpose op: a dense copy where torch makes a view, so
        only in a graph that changes nothing in place. A swap of the last two dims
        stays torch's, for a MatMul to read through its flag (_transposed)."""
        ti = self._f32(x)
        if ti is None or self._f32(node) is None or ti.rank > MAX_TRANSPOSE_RANK:
            return False
        rank = ti.rank
        permutation = _permutation(dims, rank)
        if permutation is None or self._mutating or _swaps_last_two(permutation):
            return False
        if permutation == tuple(range(rank)):
            return self._alias(node, x)
        xt = self._use(x, PLAIN)
        out = self._output(node, PLAIN, lambda s: tuple(s[0][d] for d in permutation), [self.out.resolve(x)])
        op = self.out.graph.add_op(OpKind.TRANSPOSE, [xt], [out])
        self.out.graph.set_op_attr_ints(op, OpAttr.PERMUTATION, permutation)
        return True

    def _swap(self, node: torch.fx.Node, x: Any, dim0: Any, dim1: Any) -> bool:
        """x.transpose(dim0, dim1) as a Transpose op (as _permute)."""
        ti = self._f32(x)
        if ti is None or not all(isinstance(d, int) and not isinstance(d, bool) for d in (dim0, dim1)):
            return False
        rank = ti.rank
        if not (-rank <= dim0 < rank and -rank <= dim1 < rank):
            return False
        a, b = dim0 % rank, dim1 % rank
        permutation = list(range(rank))
        permutation[a], permutation[b] = b, a
        return self._permute(node, x, permutation)

    def _attention(self, node: torch.fx.Node, q: Any, k: Any, v: Any, bias: Any, scale: Optional[float],
                   causal: bool, layout: int) -> bool:
        """_decompose.attention(q, k, v, bias, scale, causal, layout) as one Attention op."""
        if any(self._f32(x) is None for x in (q, k, v, node)) or (bias is not None and self._f32(bias) is None):
            return self._no("attention: operands that are not float32 tensors on the graph's device")
        ins = [self._use(x, PLAIN) for x in (q, k, v)] + ([self._use(bias, PLAIN)] if bias is not None else [])
        out = self._output(node, PLAIN, lambda s: tuple(s[0][:-1]) + (s[2][-1],),
                           [self.out.resolve(x) for x in (q, k, v)])
        op = self.out.graph.add_op(OpKind.ATTENTION, ins, [out])
        if scale is not None:
            self.out.graph.set_op_attr(op, OpAttr.SCALE, scale)
        self.out.graph.set_op_attr_ints(op, OpAttr.CAUSAL, [int(causal)])
        self.out.graph.set_op_attr_ints(op, OpAttr.LAYOUT, [layout])
        return True

    def _linear(self, node: torch.fx.Node, x: Any, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor],
                has_bias: bool) -> bool:
        ti = self._f32(x)
        if ti is None or ti.rank < 2 or weight is None or weight.dim() != 2 or (has_bias and bias is None):
            return False
        n = weight.shape[0]
        rule = _linear_rule(n)
        xt, wt = self._use(x, ROWS), self._constant(weight)
        if bias is None:
            self.out.graph.add_op(OpKind.MATMUL, [xt, wt], [self._output(node, ROWS, rule, [self.out.resolve(x)])],
                                  transpose_b=True)
            return True
        mm = self._temporary(node, ROWS)
        self.out.graph.add_op(OpKind.MATMUL, [xt, wt], [mm], transpose_b=True)
        out = self._output(node, ROWS, rule, [self.out.resolve(x)])
        self.out.graph.add_op(OpKind.ADD, [mm, self._constant(bias)], [out])
        return True

    def _transposed(self, node: Any) -> Tuple[Any, bool]:
        """(source, True) when `node` swaps the last two dims of `source`."""
        node = self.out.resolve(node)
        if not isinstance(node, torch.fx.Node) or self._f32(node) is None:
            return node, False
        rank = self.info[node].rank  # type: ignore[union-attr]
        args = node.args
        last_two = {rank - 2, rank - 1}
        if node.op == "call_method" and node.target == "transpose" and len(args) == 3 or \
                node.op == "call_function" and node.target is torch.transpose and len(args) == 3:
            dims = {d % rank for d in args[1:] if isinstance(d, int)}
            if dims == last_two and not node.kwargs:
                return args[0], True
        if node.op == "call_method" and node.target == "t" and len(args) == 1 and rank == 2:
            return args[0], True
        if (node.op == "call_method" and node.target == "permute" or
                node.op == "call_function" and node.target is torch.permute) and not node.kwargs:
            permutation = _permutation(args[1:], rank)
            if permutation is not None and _swaps_last_two(permutation):
                return args[0], True
        return node, False

    def _matmul(self, node: torch.fx.Node, a: Any, b: Any, batched_only: bool) -> bool:
        if self._f32(node) is None:
            return False
        b_source, tb = self._transposed(b)
        a_source, ta = self._transposed(a)
        b_weight = self._attr(b_source) if isinstance(b_source, torch.fx.Node) else None
        ai = self._f32(a_source)
        bi = None if b_weight is not None else self._f32(b_source)
        if ai is None or (bi is None and b_weight is None):
            return False
        b_rank = b_weight.dim() if b_weight is not None else bi.rank  # type: ignore[union-attr]
        if b_rank == 2 and ai.rank >= 2 and not ta and not batched_only:
            view = ROWS
        elif ai.rank == b_rank >= 3 and bi is not None and ai.shape[:-2] == bi.shape[:-2] \
                and ai.other_shape[:-2] == bi.other_shape[:-2]:
            view = BATCH
        else:
            return False
        if view == ROWS and ta:
            return False
        at = self._use(a_source, view)
        bt = self._constant(b_weight) if b_weight is not None else self._use(b_source, view)
        args = [self.out.resolve(a_source)] + ([] if b_weight is not None else [self.out.resolve(b_source)])
        rule = _matmul_rule(ta, tb, None if b_weight is None else tuple(b_weight.shape))
        self.out.graph.add_op(OpKind.MATMUL, [at, bt], [self._output(node, view, rule, args)],
                              transpose_a=ta, transpose_b=tb)
        for original, source, flag in ((a, a_source, ta), (b, b_source, tb)):
            if flag:
                self.out.folded.setdefault(self.out.resolve(original), set()).add(node)
        return True

    def _addmm(self, node: torch.fx.Node, bias: Any, a: Any, b: Any) -> bool:
        """bias + a @ b (GPT-2's Conv1D: a weight [in, out] and a bias parameter)."""
        b_weight = self._attr(b) if isinstance(b, torch.fx.Node) else None
        c_weight = self._attr(bias) if isinstance(bias, torch.fx.Node) else None
        ai, bi, ci = self._f32(a), self._f32(b), self._f32(bias)
        if ai is None or bi is None or ci is None or ai.rank != 2 or bi.rank != 2 or self._f32(node) is None:
            return self._no("addmm: operands that are not rank-2 float32 tensors on the graph's device")
        mm = self._temporary(node, PLAIN)
        bt = self._constant(b_weight) if b_weight is not None else self._use(b, PLAIN)
        self.out.graph.add_op(OpKind.MATMUL, [self._use(a, PLAIN), bt], [mm])
        c_shape = tuple(c_weight.shape) if c_weight is not None else None
        width = tuple(b_weight.shape)[1] if b_weight is not None else None
        args = ([] if c_weight is not None else [self.out.resolve(bias)]) + [self.out.resolve(a)] + \
            ([] if b_weight is not None else [self.out.resolve(b)])

        def rule(shapes: List[Shape]) -> Shape:  # the variable operands' shapes, in args' order
            given = iter(shapes)
            c = c_shape if c_shape is not None else next(given)
            rows = next(given)[0]
            return broadcast(c, (rows, width if width is not None else next(given)[1]))
        out = self._output(node, PLAIN, rule, args)
        ct = self._constant(c_weight) if c_weight is not None else self._use(bias, PLAIN)
        self.out.graph.add_op(OpKind.ADD, [mm, ct], [out])
        return True

    def _same_value(self, node: torch.fx.Node, source: Any) -> bool:
        """Whether node's value is source's as it is (a .to() / .float() of the same
        dtype and device)."""
        a, b = self._f32(node), self._f32(source)
        if a is None or b is None or a.shape != b.shape or a.other_shape != b.other_shape:
            return False
        extra = list(node.args[1:]) + list(node.kwargs.values())
        return all(e in (torch.float32, self.device, str(self.device), False, None) or
                   (isinstance(e, torch.fx.Node) and self._f32(e) is not None) for e in extra) and \
            not node.kwargs.get("copy", False)

    def _binary(self, node: torch.fx.Node, what: str, x: Any, y: Any) -> bool:
        if self._f32(node) is None:
            return False
        kind = OpKind.ADD if what == "add" else OpKind.MULTIPLY
        xs, ys = self._f32(x), self._f32(y)
        if xs is not None and isinstance(y, (int, float)) and not isinstance(y, bool):
            if what == "div":
                if y == 0:
                    return False
                y = 1.0 / y
            view = self._view_of(x)
            ins = [self._use(x, view), self._scalar(y)]
            self.out.graph.add_op(kind, ins, [self._output(node, view, _same, [self.out.resolve(x)])])
            return True
        if ys is not None and isinstance(x, (int, float)) and not isinstance(x, bool) and what in ("add", "mul"):
            return self._binary(node, what, y, x)  # 2 * x, 1 + x: commutative
        if xs is None or ys is None or what == "div":
            return self._no(f"{what}: a tensor division, or operands that are not float32 tensors and numbers")
        view = _binary_view(xs, ys, self._view_of(x) if self.out.resolve(x) in self.out.produced
                            else self._view_of(y))
        if view is None:
            return False
        args = [self.out.resolve(x), self.out.resolve(y)]
        out = self._output(node, view, lambda s: broadcast(s[0], s[1]), args)
        self.out.graph.add_op(kind, [self._use(x, view), self._use(y, view)], [out])
        return True

    # --- The end -----------------------------------------------------------

    def finish(self, torch_reads: Sequence[torch.fx.Node]) -> Lowered:
        """Marks what torch reads (and every re-read view) as outputs, and finalizes."""
        for node in torch_reads:
            made = self.out.produced.get(self.out.resolve(node))
            if made is not None:
                self._read_outside.add(made[0].id)
        g = self.out.graph
        for tensor_id in sorted(self._read_outside):
            g.mark_output(tensor_id)
        g.finalize()
        return self.out


def mutates(root: torch.nn.Module, node: torch.fx.Node) -> bool:
    """Whether the node changes a value in place (masked_fill_, x[i] = v, an
    in-place module): kept though nothing reads its result."""
    if node.op == "call_method":
        name = str(node.target)
        return name.endswith("_") and not name.startswith("_")
    if node.op == "call_function":
        return node.target is operator.setitem or getattr(node.target, "__name__", "").endswith("_") or \
            bool(node.kwargs.get("inplace")) or (hasattr(node, "is_impure") and node.is_impure())
    if node.op == "call_module":
        return bool(getattr(root.get_submodule(str(node.target)), "inplace", False))
    return False


def _permutation(dims: Sequence[Any], rank: int) -> Optional[Tuple[int, ...]]:
    """A permute's arguments after the tensor (dims, or one tuple of them) as a
    permutation of range(rank), negative dims counted from the end; None if they
    are not one."""
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = dims[0]
    if len(dims) != rank or not all(isinstance(d, int) and not isinstance(d, bool) and -rank <= d < rank
                                    for d in dims):
        return None
    permutation = tuple(d % rank for d in dims)
    return permutation if sorted(permutation) == list(range(rank)) else None


def _swaps_last_two(permutation: Sequence[int]) -> bool:
    """Whether the permutation swaps the last two axes and keeps the others."""
    rank = len(permutation)
    return rank >= 2 and tuple(permutation) == tuple(range(rank - 2)) + (rank - 1, rank - 2)


def _same(shapes: List[Shape]) -> Shape:
    return tuple(shapes[0])


def _linear_rule(n: int) -> ShapeFn:
    return lambda s: tuple(s[0][:-1]) + (n,)


def _matmul_rule(ta: bool, tb: bool, weight_shape: Optional[Shape]) -> ShapeFn:
    def rule(s: List[Shape]) -> Shape:
        a = tuple(s[0])
        b = weight_shape if weight_shape is not None else tuple(s[1])
        m = a[-1] if ta else a[-2]
        n = b[-2] if tb else b[-1]
        batch = broadcast(a[:-2], b[:-2])
        return batch + (m, n)
    return rule


def _whole_or_one_row(t: Shape, out: Shape) -> bool:
    """Whether `t`, broadcast to `out`, is all of it or one row repeated."""
    padded = (1,) * (len(out) - len(t)) + tuple(t)
    return padded[-1] == out[-1] and (padded[:-1] == tuple(out[:-1]) or all(d == 1 for d in padded[:-1]))


def _binary_view(x: TensorInfo, y: TensorInfo, preferred: str) -> Optional[str]:
    """A view both operands of a broadcasting op can be read in, or None."""
    if x.shape == y.shape and x.other_shape == y.other_shape:
        return preferred
    rows = True
    for a, b in ((x.shape, y.shape), (x.other_shape, y.other_shape)):
        out = broadcast(a, b)
        rows = rows and _whole_or_one_row(a, out) and _whole_or_one_row(b, out)
    if rows:
        return ROWS
    return PLAIN if max(x.rank, y.rank) <= 4 else None
