"""Capturing a module: torch.fx's graph of it, and what each node's value is
(shape, dtype) for two sets of inputs that differ in the dynamic dimensions,
so that a dimension computed in the model is known to follow the input.
"""
from __future__ import annotations

import contextlib
import gc
import operator
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.fx
import torch.nn.functional as F

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


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector held off while compile() runs, then as it was.
    compile() makes tens of thousands of objects (FX nodes and their arguments),
    which start full collections: each walks every object of the process, torch's
    included (a third of a fresh process's compile() on this machine). What
    compile() makes is kept or freed by reference counts; cyclic garbage waits for
    the next collection after it. The collector's switch is the process's: a thread
    that turns it off meanwhile finds it on again afterwards."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def trace(module: torch.nn.Module) -> torch.fx.Graph:
    """The module's FX graph (a GraphModule's own). Not a GraphModule: nothing
    runs the graph as it is, and generating its Python code took 10-20 ms."""
    if isinstance(module, torch.fx.GraphModule):
        return copy_graph(module.graph)  # lowering may add nodes: never to the caller's graph
    try:
        return torch.fx.Tracer().trace(module)
    except Exception as e:  # FX raises TraceError, TypeError, NotImplementedError...
        raise TraceFailed(f"torch.fx could not trace {type(module).__name__}: {type(e).__name__}: {e}. "
                          "Make the module traceable (no control flow on tensor values, no iterating "
                          "over a tensor's size), or on torch >= 2 use torch.compile(module, "
                          "backend=\"unicache\")", what="unicache.torch.compile") from e


def copy_graph(graph: torch.fx.Graph) -> torch.fx.Graph:
    """A copy of `graph` whose nodes share their arguments' constants and their meta's
    values (copy.deepcopy would copy dynamo's fake tensors too)."""
    out = torch.fx.Graph()
    env: Dict[torch.fx.Node, torch.fx.Node] = {}
    for node in graph.nodes:
        env[node] = out.node_copy(node, lambda n: env[n])
    return out


LINEAR_FUNCTIONS = {F.linear, torch._C._nn.linear}  # dynamo records the latter
MATMUL_FUNCTIONS = {torch.matmul, torch.bmm, operator.matmul}
_SAME_SHAPE = {F.relu, torch.relu, torch.sigmoid, torch.tanh, F.gelu, F.softmax, torch.softmax, F.layer_norm,
               F.dropout}
_SAME_SHAPE_MODULES = (torch.nn.ReLU, torch.nn.GELU, torch.nn.Sigmoid, torch.nn.Tanh, torch.nn.Softmax,
                       torch.nn.LayerNorm, torch.nn.Dropout)


def _empty(x: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    return torch.empty(tuple(shape), dtype=x.dtype, device=x.device)


def _shape_only(target: Any, module: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Optional[torch.Tensor]:
    """An empty tensor shaped as `target(*args)`'s result, for the ops whose shape
    rule is plain; None: run it for real."""
    if not args or not isinstance(args[0], torch.Tensor) or args[0].dim() == 0:
        return None
    # Each stub checks what torch would (a size that does not fit raises, as the
    # real op does), so a dimension that cannot change is never taken for one
    # that can; anything unusual runs for real.
    x = args[0]
    if module is not None:
        if len(args) != 1 or kwargs:
            return None
        if isinstance(module, torch.nn.Linear):
            _fits(x.shape[-1] == module.in_features, x, f"a Linear of {module.in_features} inputs")
            return _empty(x, tuple(x.shape[:-1]) + (module.out_features,))
        if isinstance(module, torch.nn.LayerNorm):
            shape = tuple(module.normalized_shape)
            _fits(tuple(x.shape[-len(shape):]) == shape, x, f"a LayerNorm over {list(shape)}")
            return _empty(x, x.shape)
        if isinstance(module, _SAME_SHAPE_MODULES):
            return _empty(x, x.shape)
        return None
    if target in LINEAR_FUNCTIONS and len(args) >= 2 and isinstance(args[1], torch.Tensor) and args[1].dim() == 2:
        _fits(x.shape[-1] == args[1].shape[1], x, f"a weight of shape {list(args[1].shape)}")
        return _empty(x, tuple(x.shape[:-1]) + (args[1].shape[0],))
    if target in MATMUL_FUNCTIONS and len(args) == 2 and isinstance(args[1], torch.Tensor) and not kwargs:
        a, b = tuple(x.shape), tuple(args[1].shape)
        if len(a) < 2 or len(b) < 2:
            return None
        rank = max(len(a), len(b)) - 2
        pa, pb = (1,) * (rank - len(a) + 2) + a[:-2], (1,) * (rank - len(b) + 2) + b[:-2]
        _fits(a[-1] == b[-2] and all(p == q or 1 in (p, q) for p, q in zip(pa, pb)), x,
              f"a MatMul with {list(b)}")
        return _empty(x, broadcast(a[:-2], b[:-2]) + (a[-2], b[-1]))
    if target is F.layer_norm and len(args) >= 2:
        shape = (args[1],) if isinstance(args[1], int) else tuple(args[1])
        _fits(tuple(x.shape[-len(shape):]) == shape, x, f"a LayerNorm over {list(shape)}")
        return _empty(x, x.shape)
    if target in _SAME_SHAPE and target is not F.layer_norm and kwargs.get("dtype") is None and len(args) <= 2:
        return _empty(x, x.shape)
    return None


def broadcast(a: Sequence[int], b: Sequence[int]) -> Shape:
    """numpy's broadcast of two shapes that broadcast (torch.broadcast_shapes
    without its cost: on torch 2 its first call imports sympy, 2 s)."""
    rank = max(len(a), len(b))
    a = (1,) * (rank - len(a)) + tuple(a)
    b = (1,) * (rank - len(b)) + tuple(b)
    return tuple(y if x == 1 else x for x, y in zip(a, b))


def _fits(ok: bool, x: torch.Tensor, what: str) -> None:
    if not ok:
        raise RuntimeError(f"shape {list(x.shape)} does not fit {what}")


def _run(root: torch.nn.Module, graph: torch.fx.Graph, inputs: Sequence[Any]) -> Dict[torch.fx.Node, Any]:
    """Every node's value, `root`'s graph run on `inputs` by a plain loop over its nodes
    (torch.fx.Interpreter's bookkeeping per node cost more than the node's op). The
    ops unicache lowers are not computed: their results are empty tensors of the
    shape they would have (their shapes are all that is wanted), so no GEMM runs
    and no library such as cuBLAS starts (its first use took 123 ms on the GPU host)."""
    values: Dict[torch.fx.Node, Any] = {}
    given = iter(inputs)
    with torch.no_grad():
        for n in graph.nodes:
            try:
                values[n] = _run_node(root, n, values, given)
            except Exception as e:  # as torch.fx.Interpreter does: the node is named
                if e.args and isinstance(e.args[0], str):
                    e.args = (f"{e.args[0]}\n\nWhile executing {n.format_node()}",) + e.args[1:]
                raise
            if n.op == "output":
                break
    return values


def _run_node(root: torch.nn.Module, n: torch.fx.Node, values: Dict[torch.fx.Node, Any], given: Iterator[Any]) -> Any:
    """One node's value, as torch.fx.Interpreter computes it (see _run)."""
    if n.op == "placeholder":
        if str(n.target).startswith("*"):
            return list(given)
        try:
            return next(given)
        except StopIteration:
            if n.args:
                return n.args[0]  # the argument's default
            raise RuntimeError(f"expected an input for {n.target}") from None
    if n.op == "get_attr":
        return attribute(root, str(n.target))
    load = values.__getitem__
    if n.op == "output":
        return torch.fx.node.map_arg(n.args[0], load)
    args, kwargs = torch.fx.node.map_arg(n.args, load), torch.fx.node.map_arg(n.kwargs, load)
    if n.op == "call_method":
        return getattr(args[0], str(n.target))(*args[1:], **kwargs)
    module = attribute(root, str(n.target)) if n.op == "call_module" else None
    if n.kwargs.get("out") is None:  # the node's: a loaded tensor has no truth value
        shaped = _shape_only(n.target, module, args, kwargs)
        if shaped is not None:
            return shaped
    return module(*args, **kwargs) if module is not None else n.target(*args, **kwargs)


def attribute(root: torch.nn.Module, target: str) -> Any:
    """The attribute a get_attr or call_module node names ("layer.0.weight")."""
    value: Any = root
    for atom in target.split("."):
        if not hasattr(value, atom):
            raise RuntimeError(f"node target {target} does not exist in the module")
        value = getattr(value, atom)
    return value


def other_inputs(inputs: Sequence[Any], dynamic: Sequence[Sequence[int]], grow: int,
                 sizes: Dict[int, Tuple[int, int]]) -> List[Any]:
    """The inputs with each dynamic dimension `grow` larger (random data: only shapes
    matter), and each size input (sizes: input -> (tensor input, dim)) following it."""
    out: List[Any] = []
    for t, dims in zip(inputs, dynamic):
        if not isinstance(t, torch.Tensor) or not dims:
            out.append(t)  # unchanged (a lifted constant keeps its value)
            continue
        shape = list(t.shape)
        for d in dims:
            shape[d] += grow
        out.append(torch.randn(shape, dtype=t.dtype, device=t.device) if t.is_floating_point()
                   else torch.zeros(shape, dtype=t.dtype, device=t.device))
    for i, (tensor, dim) in sizes.items():
        out[i] = out[tensor].shape[dim]
    return out


class _Symbols:
    """Values for dynamo's symbolic sizes: each symbol's hint (the size dynamo
    captured with) and, for the second shape, the hint plus an offset of its
    own, so that two symbols with one hint stay apart. Nothing here evaluates a
    symbol through torch (int(), comparisons): each such read would make dynamo
    guard on the value and capture again for every new size."""

    def __init__(self) -> None:
        self._values: Dict[Any, Tuple[int, int]] = {}  # expression -> (hint, other)
        self._offsets: Dict[Any, int] = {}

    def sizes(self, size: Any) -> Tuple[int, int]:
        """(hint, other) of one dimension: an int, or a SymInt."""
        if isinstance(size, int):
            return size, size
        node = size.node
        expr = node.expr
        known = self._values.get(expr)
        if known is not None:
            return known
        if getattr(expr, "is_number", False):
            value = int(expr)
            known = (value, value)
        else:
            env = node.shape_env
            values = getattr(env, "backed_var_to_val", None)  # torch >= 2.10's name
            values = values if values is not None else env.var_to_val
            hints, others = {}, {}
            for s in expr.free_symbols:
                hint = values.get(s)
                hint = int(hint) if hint is not None else 1  # unbacked: any size will do
                offset = self._offsets.setdefault(s, 1 + 7 * len(self._offsets))
                hints[s], others[s] = hint, hint + offset
            hint = node.hint if node.has_hint() else expr.xreplace(hints)
            known = (int(hint), int(expr.xreplace(others)))
        self._values[expr] = known
        return known


def symbolic_info(root: torch.nn.Module, graph: torch.fx.Graph) -> Dict[torch.fx.Node, Optional[TensorInfo]]:
    """describe() for a graph dynamo captured, from the values dynamo recorded on its
    nodes (node.meta["example_value"]): a dimension dynamo left symbolic differs
    between the two shapes; nothing runs (running the graph on dynamo's examples would
    compute with its symbolic sizes, and guard on them). A get_attr node's value is the
    attribute; a node with no recorded value is not taken for a tensor (torch runs it)."""
    symbols = _Symbols()
    info: Dict[torch.fx.Node, Optional[TensorInfo]] = {}
    for node in graph.nodes:
        value = attribute(root, str(node.target)) if node.op == "get_attr" else node.meta.get("example_value")
        if not isinstance(value, torch.Tensor):
            info[node] = None
            continue
        pairs = [symbols.sizes(d) for d in value.shape]
        info[node] = TensorInfo(tuple(p[0] for p in pairs), tuple(p[1] for p in pairs), value.dtype, value.device)
    return info


def describe(root: torch.nn.Module, graph: torch.fx.Graph, inputs: Sequence[Any], dynamic: Sequence[Sequence[int]],
             sizes: Dict[int, Tuple[int, int]]) -> Dict[torch.fx.Node, Optional[TensorInfo]]:
    """Each node's TensorInfo (None for a value that is not a tensor), from a run on
    `inputs` and one on inputs whose dynamic dimensions are larger."""
    first = _run(root, graph, inputs)
    second: Optional[Dict[torch.fx.Node, Any]] = None
    failures = []
    for grow in (1, 2, 8):  # a model may need, say, even lengths: try a few
        try:
            second = _run(root, graph, other_inputs(inputs, dynamic, grow, sizes))
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
