"""The torch.compile backend "unicache" (torch >= 2): dynamo captures the
graph (any model it can capture, where torch.fx's symbolic tracing may
fail), and unicache.torch compiles it as compile() does.

    import unicache.torch
    unicache.torch.register_dynamo_backend()
    model = torch.compile(model, backend="unicache", dynamic=True)

Dynamo passes a module's parameters as graph inputs on recent torch; they
become unicache constants here (the same tensors every call). With
dynamic=True, dynamo's symbolic sizes are inputs too: each is matched to the
tensor dimension it is, so the dimensions dynamo marked dynamic are -1.
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Dict, List, Sequence, Tuple

import torch
import torch.fx


def _symbol(size: Any) -> str:
    """A symbolic size's name ("s0"), "" for a plain int."""
    return "" if isinstance(size, int) else str(size)


def _real(t: Any) -> Any:
    """A real tensor for an example dynamo may give as a fake one; an int for a
    symbolic size (its hint)."""
    if isinstance(t, torch.SymInt):
        return int(t)
    if isinstance(t, torch.Tensor) and type(t).__name__ == "FakeTensor":
        shape = [int(s) for s in t.shape]
        return torch.randn(shape, device=t.device).to(t.dtype) if t.is_floating_point() \
            else torch.zeros(shape, dtype=t.dtype, device=t.device)
    return t


def _lift_parameters(gm: torch.fx.GraphModule, inputs: Sequence[Any]) -> List[int]:
    """Turns placeholders fed with parameters into attributes of `gm`; returns
    their input positions (which the compiled function drops)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    lifted = []
    for i, (node, value) in enumerate(zip(placeholders, inputs)):
        if isinstance(value, torch.nn.Parameter):
            name = f"_unicache_parameter_{i}"
            setattr(gm, name, value)
            with gm.graph.inserting_before(node):
                attribute = gm.graph.get_attr(name)
            node.replace_all_uses_with(attribute)
            gm.graph.erase_node(node)
            lifted.append(i)
    gm.recompile()
    return lifted


def _dynamic(gm: torch.fx.GraphModule, inputs: List[Any]) -> Tuple[List[List[int]], Dict[int, Tuple[int, int]]]:
    """Each tensor input's dynamic dims (dynamo's symbolic ones, else dim 0), and
    each int input's (tensor input, dim) of the same symbol."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    symbols: Dict[str, List[Tuple[int, int]]] = {}  # symbol -> every (tensor input, dim) it sizes
    for i, (node, value) in enumerate(zip(placeholders, inputs)):
        example = node.meta.get("example_value")
        if isinstance(value, torch.Tensor) and example is not None and hasattr(example, "shape"):
            for d, size in enumerate(example.shape):
                name = _symbol(size)
                if name:
                    symbols.setdefault(name, []).append((i, d))
    sizes = {}
    for i, (node, value) in enumerate(zip(placeholders, inputs)):
        if not isinstance(value, torch.Tensor):
            name = _symbol(node.meta.get("example_value", value))
            if name in symbols:
                sizes[i] = symbols[name][0]
    if not symbols:  # a static capture: the batch may still change between calls
        return [[0] if isinstance(v, torch.Tensor) and v.dim() > 0 else [] for v in inputs], sizes
    return _changeable(gm, inputs, symbols, sizes), sizes


def _changeable(gm: torch.fx.GraphModule, inputs: List[Any], symbols: Dict[str, List[Tuple[int, int]]],
                sizes: Dict[int, Tuple[int, int]]) -> List[List[int]]:
    """The dims of the symbols the graph runs with when each symbol changes
    (every dim it sizes at once: a batch shared by an input and its mask):
    with dynamic=True dynamo leaves a dimension symbolic in the graph's
    examples even where a guard pins it (a Linear's input features)."""
    from ._capture import _run, other_inputs
    kept: List[List[int]] = [[] for _ in inputs]
    for where in symbols.values():
        trial: List[List[int]] = [[] for _ in inputs]
        for i, d in where:
            trial[i].append(d)
        try:
            _run(gm, gm.graph, other_inputs(inputs, trial, 1, sizes))
        except Exception:  # pinned: changing it breaks the graph
            continue
        for i, d in where:
            kept[i].append(d)
    return kept


def dynamo_backend(gm: torch.fx.GraphModule, example_inputs: List[Any]) -> Callable[..., Any]:
    """torch.compile's backend: `gm` through unicache.torch; returns the function dynamo calls."""
    from . import compile_graph
    inputs = [_real(t) for t in example_inputs]
    # The graph as dynamo gave it, for calls with other parameters (its
    # submodules and attributes shared, not copied).
    as_given = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
    lifted = _lift_parameters(gm, inputs)
    bound = {i: inputs[i] for i in lifted}
    kept = [t for i, t in enumerate(inputs) if i not in bound]
    dynamic, sizes = _dynamic(gm, kept)
    compiled = compile_graph(gm, gm.graph, kept, dynamic, sizes)

    def run(*args: Any) -> Any:
        # Dynamo calls with every input, or (torch 2.11) without the parameters
        # it knows are static: those are bound already. One graph may serve
        # several modules (a repeated layer): other parameters than the bound
        # ones run the graph in torch, never with the wrong weights.
        if len(args) == len(example_inputs):
            if any(args[i] is not p for i, p in bound.items()):
                return as_given(*args)
            args = tuple(a for i, a in enumerate(args) if i not in bound)
        return compiled(*args)
    return run


def register_dynamo_backend() -> None:
    """Registers the backend with dynamo under the name "unicache" (torch >= 2;
    nothing on torch 1.x). `import unicache.torch` does it when dynamo is loaded."""
    try:
        from torch._dynamo import register_backend
    except ImportError:  # torch 1.x: no dynamo
        return
    try:
        register_backend(name="unicache")(dynamo_backend)
    except Exception:  # registered already (the package imported twice under two names)
        pass
