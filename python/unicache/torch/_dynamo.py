"""The torch.compile backend "unicache" (torch >= 2): dynamo captures the
graph (any model it can capture, where torch.fx's symbolic tracing may
fail), and unicache.torch lowers it as compile() does.

    import torch, unicache.torch
    model = torch.compile(model, backend="unicache")        # or dynamic=True

The backend is found by name without a call: the package declares it in the
`torch_dynamo_backends` entry point group, which torch.compile reads
(register_dynamo_backend() does the same by hand for a source tree).

Sizes stay symbolic. What each node's value is comes from what dynamo
recorded on the graph (node.meta["example_value"]): a dimension dynamo left
symbolic is -1 in the unicache graph and its value is read from the call's
tensors when the call runs; the backend never turns a symbolic size into an
int, compares one, or runs the graph at other sizes, each of which would
make dynamo guard on the size and capture again for every new one. A graph
dynamo captured with static sizes (its default, until a second size makes a
dimension dynamic) is compiled for those sizes; dynamo's guards call the
backend again when they change.

Nothing runs silently in torch: a graph the backend cannot compile runs in
torch, and a recapture or dynamo's recompile limit is counted; the first of
each says why in one FallbackWarning (unicache.torch.statistics()).
Dynamo passes a module's parameters as graph inputs on recent torch; they
become unicache constants here (the same tensors every call).
"""
from __future__ import annotations

import math
import operator
import threading
import time
from typing import Any, Callable, Dict, List, Sequence, Tuple

import torch
import torch.fx

from . import _report
from ._capture import collector_paused, symbolic_info


def _lift_parameters(gm: torch.fx.GraphModule, inputs: Sequence[Any], prefix: str = "_unicache_parameter"
                     ) -> Tuple[torch.fx.Graph, Dict[int, Any], Dict[torch.fx.Node, int]]:
    """A copy of gm's graph whose placeholders fed with parameters read attributes of
    `gm` instead; those parameters by input position; the copy's placeholders' input
    positions. gm's own graph and code are left as dynamo made them (the fallback runs
    them)."""
    graph = torch.fx.Graph()
    env: Dict[torch.fx.Node, torch.fx.Node] = {}
    bound: Dict[int, Any] = {}
    positions: Dict[torch.fx.Node, int] = {}
    position = 0
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            value = inputs[position] if position < len(inputs) else None
            if isinstance(value, torch.nn.Parameter):
                name = f"{prefix}_{position}"
                setattr(gm, name, value)
                env[node] = graph.get_attr(name)
                env[node].meta = dict(node.meta)
                bound[position] = value
            else:
                env[node] = graph.node_copy(node, lambda n: env[n])
                positions[env[node]] = position
            position += 1
            continue
        env[node] = graph.node_copy(node, lambda n: env[n])
    return graph, bound, positions


def _recapture_reason() -> Tuple[bool, str]:
    """Whether this capture recompiles a function dynamo captured before, and the
    guard that failed (dynamo's own record of it)."""
    try:
        from torch._guards import CompileContext
        compile_id = CompileContext.current_compile_id()
    except Exception:  # no compile context (a direct call of the backend)
        return False, ""
    if compile_id is None or not getattr(compile_id, "frame_compile_id", 0):
        return False, ""
    reason = ""
    try:
        from torch._dynamo.utils import guard_failures
        reasons = [r for failures in guard_failures.values() for r in failures]
        reason = str(reasons[-1]) if reasons else ""
    except Exception:  # an older dynamo without the table: the count still holds
        pass
    return True, reason


def dynamo_backend(gm: torch.fx.GraphModule, example_inputs: List[Any]) -> Callable[..., Any]:
    """torch.compile's backend: `gm` through unicache.torch; returns the function dynamo
    calls. Never raises: a graph it cannot compile runs in torch, said once."""
    started = time.perf_counter()
    try:
        return _backend(gm, example_inputs)
    finally:
        _report.add_time("backend_ms", (time.perf_counter() - started) * 1e3)


def _backend(gm: torch.fx.GraphModule, example_inputs: List[Any]) -> Callable[..., Any]:
    _report.watch_recompile_limit()
    recapture, reason = _recapture_reason()
    _report.count("captures")
    if recapture:
        _report.count("recaptures", "recapture",
                      "unicache: torch.compile captured a function again (dynamo's guard failed: "
                      f"{_one_line(reason) or 'reason not recorded'}); recaptures are counted in "
                      "unicache.torch.statistics()")
    try:
        with collector_paused():
            first = _compile(gm, example_inputs)
    except Exception as e:  # anything: the graph still runs, in torch
        _report.count("graphs_in_torch", f"in_torch:{type(e).__name__}",
                      f"unicache: a graph torch.compile captured runs in torch, not unicache: "
                      f"{type(e).__name__}: {_one_line(str(e))}")
        return gm.forward
    if first[0].partitions == 0:
        _report.count("graphs_without_partitions", "no_partitions",
                      "unicache: a graph torch.compile captured has no op unicache runs (it runs in torch); "
                      "unicache.torch.explain() says why for each op")
    return _runner(gm, first, len(example_inputs))


def _compile(gm: torch.fx.GraphModule, example_inputs: Sequence[Any],
             prefix: str = "_unicache_parameter") -> Tuple[Any, Dict[int, Any], Dict[int, Any]]:
    """The compiled module, the parameters it binds and the numbers it folded, by input position."""
    from ._plan import build, plan
    graph, bound, scalars = prepare(gm, example_inputs, prefix)
    return build(plan(gm, graph, symbolic_info(gm, graph))), bound, scalars


def prepare(gm: torch.fx.GraphModule, example_inputs: Sequence[Any],
            prefix: str = "_unicache_parameter") -> Tuple[torch.fx.Graph, Dict[int, Any], Dict[int, Any]]:
    """dynamo's graph as lowering takes it (a copy): parameters as attributes, numbers
    folded; the parameters and numbers by input position."""
    graph, bound, positions = _lift_parameters(gm, example_inputs, prefix)
    scalars = _fold_scalars(graph, positions, example_inputs)
    fold_constants(graph)
    return graph, bound, scalars


# Pure functions of numbers dynamo leaves as nodes once their operands are
# numbers (GELU's sqrt(2 / pi), with pi a global it passes as an input).
_NUMBER_FUNCTIONS = {operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv, operator.pow,
                     operator.neg, math.sqrt, math.exp, math.log, getattr(torch, "_sym_sqrt", math.sqrt),
                     getattr(torch, "sym_float", float), getattr(torch, "sym_sqrt", math.sqrt)}


def fold_constants(graph: torch.fx.Graph) -> None:
    """Nodes of _NUMBER_FUNCTIONS whose operands are all numbers replaced by their value."""
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in _NUMBER_FUNCTIONS or node.kwargs:
            continue
        if not all(isinstance(a, (int, float)) and not isinstance(a, bool) for a in node.args):
            continue
        try:
            value = node.target(*node.args)
        except (ArithmeticError, ValueError, TypeError):
            continue
        if not isinstance(value, (int, float)):
            continue
        for user in list(node.users):
            user.args = torch.fx.node.map_arg(user.args, lambda n: value if n is node else n)
            user.kwargs = torch.fx.node.map_arg(user.kwargs, lambda n: value if n is node else n)
        graph.erase_node(node)


def _fold_scalars(graph: torch.fx.Graph, positions: Dict[torch.fx.Node, int],
                  example_inputs: Sequence[Any]) -> Dict[int, Any]:
    """Numbers dynamo passes as 0-d CPU tensors read with .item() (a model's float
    attributes: LayerNorm's epsilon, attention's scale) made the numbers they were in
    the example, so that lowering sees a number; returns them by input position, which
    each call checks (another value compiles again)."""
    folded: Dict[int, Any] = {}
    for node, position in positions.items():
        value = example_inputs[position] if position < len(example_inputs) else None
        if not (isinstance(value, torch.Tensor) and value.dim() == 0 and value.device.type == "cpu"
                and type(value).__name__ != "FakeTensor"):
            continue
        reads = [u for u in node.users if u.op == "call_method" and u.target == "item" and len(u.args) == 1]
        if not reads:
            continue
        number = value.item()
        for read in reads:
            for user in list(read.users):
                user.args = torch.fx.node.map_arg(user.args, lambda n: number if n is read else n)
                user.kwargs = torch.fx.node.map_arg(user.kwargs, lambda n: number if n is read else n)
            graph.erase_node(read)
        folded[position] = number
    return folded


def _runner(gm: torch.fx.GraphModule, first: Tuple[Any, Dict[int, Any], Dict[int, Any]],
            arity: int) -> Callable[..., Any]:
    """The function dynamo calls: the compiled module for the call's parameters and
    folded numbers (compiled again for others, up to MAX_VARIANTS), else gm in torch."""
    from ..errors import InvalidArgument, InvalidTensorType
    compiled, bound, scalars = first
    parameters, numbers = sorted(bound), sorted(scalars)
    kept = [i for i in range(arity) if i not in bound]  # positions of a call without the parameters
    # Where each folded number is in a call with every input and in one without the
    # parameters (read at every call: ~130 numbers per call of a BERT graph).
    numbers_at = {True: numbers, False: [kept.index(i) for i in numbers]}

    def key_of(args: Tuple[Any, ...], full: bool) -> Tuple[Any, ...]:
        values = tuple([args[i].item() for i in numbers_at[full]])
        return tuple([id(args[i]) for i in parameters]) + values if full else values

    first_key = tuple(id(bound[i]) for i in parameters) + tuple(scalars[i] for i in numbers)
    variants = {first_key: compiled}
    lock = threading.Lock()

    def variant(args: Tuple[Any, ...], key: Tuple[Any, ...]) -> Any:
        with lock:
            if key not in variants:
                if len(variants) >= MAX_VARIANTS:
                    return None
                with collector_paused():
                    variants[key] = _compile(gm, args, f"_unicache_parameter_v{len(variants)}")[0]
            return variants[key]

    def run(*args: Any) -> Any:
        # Dynamo calls with every input, or (torch 2.11) without the parameters
        # it knows are static: those are bound already.
        full = len(args) == arity
        module = compiled
        if parameters or numbers:
            key = key_of(args, full) if full else first_key[:len(parameters)] + key_of(args, False)
            module = variants.get(key)
            if module is None:
                try:
                    module = variant(args, key) if full else None
                    reason = f"more than {MAX_VARIANTS} sets" if full else "a call without its parameters"
                except Exception as e:  # compiles as the first did: not expected to fail
                    module, reason = None, f"{type(e).__name__}: {_one_line(str(e))}"
                if module is None:
                    _report.count("calls_in_torch", "variant",
                                  "unicache: a captured graph called with other parameters or numbers than it was "
                                  f"compiled with runs in torch ({reason})")
                    return gm(*args)
        call = tuple(a for i, a in enumerate(args) if i not in bound) if full else args
        try:
            return module(*call)
        except (InvalidArgument, InvalidTensorType) as e:  # checked before anything ran
            _report.count("calls_in_torch", f"unfit:{type(e).__name__}",
                          f"unicache: a call did not fit its compiled graph and ran in torch: {_one_line(str(e))}")
            return gm(*args)
    return run


# Parameter and number sets one captured graph is compiled for at most (a frame
# of a repeated layer that dynamo captured on its own serves every layer).
MAX_VARIANTS = 64


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def register_dynamo_backend() -> None:
    """Registers the backend with dynamo under the name "unicache" (torch >= 2;
    nothing on torch 1.x). An installed package needs no call (its entry point);
    `import unicache.torch` does it when dynamo is loaded."""
    try:
        from torch._dynamo.backends import registry
    except ImportError:  # torch 1.x: no dynamo
        return
    compilers, found = getattr(registry, "_COMPILER_FNS", {}), getattr(registry, "_BACKENDS", {})
    if "unicache" in compilers or found.get("unicache") is not None:
        # Registered, or found through the entry point, which dynamo's lookup is
        # loading now (it registers the function itself: a second would be refused).
        return
    try:
        registry.register_backend(name="unicache")(dynamo_backend)
    except Exception:  # registered meanwhile, or a registry of another shape
        pass
