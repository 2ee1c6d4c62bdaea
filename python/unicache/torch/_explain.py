"""unicache.torch.explain(model, *example_inputs, **kwargs): what would run where.

    report = unicache.torch.explain(model, input_ids)
    print(report)                       # per captured graph: ops in unicache and in torch, why
    report.matmul_flop_share            # of the matmul FLOPs, the share unicache runs

On torch >= 2 the model is captured as torch.compile(model, backend="unicache",
dynamic=True) would capture it (dynamo, any model it can capture; graph breaks
make several graphs); on torch 1.x as unicache.torch.compile would (torch.fx,
positional inputs only). Each graph is lowered exactly as the backend lowers it;
nothing is compiled and the model runs in torch (its outputs are torch's). On
torch >= 2 it resets dynamo's caches before and after (as torch._dynamo.explain
does): functions compiled earlier in the process are captured again at their next
call.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.fx

from ._capture import LINEAR_FUNCTIONS, MATMUL_FUNCTIONS, TensorInfo, attribute
from ._decompose import BLHD, SDPA_FUNCTIONS, attention


@dataclass
class GraphReport:
    """One captured graph: what lowering sent to unicache and what it left to torch."""

    index: int
    ops_in_unicache: int
    ops_in_torch: int
    matmul_flops_in_unicache: int  # at the example's sizes
    matmul_flops_in_torch: int
    partitions: int
    # Why ops stayed torch's: reason -> how many ops (views and size arithmetic included).
    torch_reasons: Dict[str, int]
    dynamic_dims: List[str]  # each input: its shape with -1 for a dynamic dimension
    recapture_reason: str = ""  # the guard that failed, when this graph is a recapture
    error: str = ""  # what made the backend leave the whole graph to torch

    @property
    def matmul_flop_share(self) -> float:
        total = self.matmul_flops_in_unicache + self.matmul_flops_in_torch
        return self.matmul_flops_in_unicache / total if total else 1.0


@dataclass
class Explanation:
    """explain()'s report: one GraphReport per captured graph, in capture order."""

    graphs: List[GraphReport] = field(default_factory=list)
    graph_breaks: int = 0
    door: str = ""  # "torch.compile (dynamo)" or "unicache.torch.compile (torch.fx)"

    @property
    def matmul_flop_share(self) -> float:
        done = sum(g.matmul_flops_in_unicache for g in self.graphs)
        total = done + sum(g.matmul_flops_in_torch for g in self.graphs)
        return done / total if total else 1.0

    @property
    def recaptures(self) -> int:
        return sum(1 for g in self.graphs if g.recapture_reason)

    def __str__(self) -> str:
        lines = [f"unicache.torch.explain via {self.door}: {len(self.graphs)} graph(s), {self.graph_breaks} graph "
                 f"break(s), {self.matmul_flop_share:.1%} of matmul FLOPs in unicache"]
        for g in self.graphs:
            lines.append(f"graph {g.index}: {g.ops_in_unicache} ops in unicache ({g.partitions} partitions), "
                         f"{g.ops_in_torch} in torch, matmul FLOPs in unicache {g.matmul_flop_share:.1%}; inputs "
                         + ", ".join(g.dynamic_dims))
            if g.error:
                lines.append(f"  runs wholly in torch: {g.error}")
            if g.recapture_reason:
                lines.append(f"  recaptured: {g.recapture_reason}")
            for reason, n in sorted(g.torch_reasons.items(), key=lambda item: -item[1]):
                lines.append(f"  torch x{n}: {reason}")
        return "\n".join(lines)


def matmul_flops(node: torch.fx.Node, info: Dict[torch.fx.Node, Optional[TensorInfo]], root: Any = None) -> int:
    """2 * M * N * K (times the batch) of a matmul-like node at the example's sizes; 0 for others."""
    out = info.get(node)
    if out is None:
        return 0
    def shape(x: Any) -> Optional[Tuple[int, ...]]:
        ti = info.get(x) if isinstance(x, torch.fx.Node) else None
        return ti.shape if ti is not None else None
    numel = math.prod(out.shape)
    k: Optional[int] = None
    target, args = node.target, node.args
    if node.op == "call_module" and root is not None:
        module = attribute(root, str(target))
        if isinstance(module, torch.nn.Linear):
            k = module.in_features
    elif node.op == "call_function" and target in LINEAR_FUNCTIONS and args:
        a = shape(args[0])
        k = a[-1] if a else None
    elif (node.op == "call_function" and target in MATMUL_FUNCTIONS or
          node.op == "call_method" and target in ("matmul", "bmm")) and len(args) == 2:
        a = shape(args[0])
        k = a[-1] if a else None
    elif node.op == "call_function" and target in (torch.addmm, torch.baddbmm) and len(args) >= 3:
        a = shape(args[1])
        k = a[-1] if a else None
    elif node.op == "call_function" and (target in SDPA_FUNCTIONS or target is attention):
        q, key, v = (shape(a) for a in args[:3])
        blhd = target is attention and len(args) == 7 and args[6] == BLHD
        if q and key and v:
            return 2 * math.prod(q[:-1]) * key[1 if blhd else -2] * (q[-1] + v[-1])
    return 2 * numel * k if k else 0


def report_for(index: int, p: Any, recapture_reason: str = "") -> GraphReport:
    """A GraphReport of a lowered plan (see _plan.plan)."""
    from ._lowering import op_name
    lowered = p.lowered
    refused = set(p.refused)
    in_unicache = in_torch = 0
    flops_u = flops_t = 0
    reasons: Counter = Counter()
    live = {s.node for s in p.steps if hasattr(s, "node")}
    for node in p.graph.nodes:
        if node.op in ("placeholder", "output", "get_attr"):
            continue
        flops = matmul_flops(node, p.info, p.root)
        if node in refused:
            if node in lowered.folded and set(node.users) <= lowered.folded[node]:
                in_unicache += 1  # a transpose read through a MatMul flag
                flops_u += flops
                continue
            if node not in live:
                continue  # dead: runs nowhere
            in_torch += 1
            flops_t += flops
            reasons[lowered.reasons.get(node, op_name(node))] += 1
        else:
            in_unicache += 1
            flops_u += flops
    dims = []
    for ph in p.placeholders:
        ti = p.info.get(ph)
        if ti is not None:
            dims.append(f"{ph.name}[" + ",".join(str(a) if a == b else "-1" for a, b in zip(ti.shape, ti.other_shape))
                        + "]")
    return GraphReport(index, in_unicache, in_torch, flops_u, flops_t, p.partitions, dict(reasons), dims,
                       recapture_reason)


def explain(model: torch.nn.Module, *example_inputs: Any, **kwargs: Any) -> Explanation:
    """What unicache would run of `model` called with these inputs, per captured graph
    (see the module's docstring). Raises what the capture raises (TraceFailed on the
    torch.fx door)."""
    try:
        import torch._dynamo  # noqa: F401
    except ImportError:
        return _explain_fx(model, example_inputs, kwargs)
    return _explain_dynamo(model, example_inputs, kwargs)


def _explain_dynamo(model: Any, inputs: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Explanation:
    from ._capture import collector_paused, symbolic_info
    from ._dynamo import _recapture_reason, prepare
    from ._plan import plan
    report = Explanation(door="torch.compile (dynamo)")

    def backend(gm: torch.fx.GraphModule, example_inputs: List[Any]) -> Any:
        recapture, reason = _recapture_reason()
        index = len(report.graphs)
        try:
            with collector_paused():
                graph, _, _ = prepare(gm, example_inputs)
                info = symbolic_info(gm, graph)
                report.graphs.append(report_for(index, plan(gm, graph, info), reason if recapture else ""))
        except Exception as e:  # the backend would run this graph in torch: say why
            report.graphs.append(GraphReport(index, 0, sum(1 for n in gm.graph.nodes if n.op.startswith("call")),
                                             0, 0, 0, {}, [], reason if recapture else "",
                                             f"{type(e).__name__}: {e}"))
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend, dynamic=True)
    with torch.no_grad():
        compiled(*inputs, **kwargs)
    report.graph_breaks = max(0, len(report.graphs) - 1 - report.recaptures)
    torch._dynamo.reset()
    return report


def _explain_fx(model: Any, inputs: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Explanation:
    from ..errors import InvalidArgument
    from ._capture import describe, trace
    from ._plan import check_inputs, plan
    if kwargs:
        raise InvalidArgument("explain: torch.fx captures positional inputs only (keyword inputs need torch >= 2)")
    graph = trace(model)
    check_inputs(graph, inputs)
    dynamic = [[0] if isinstance(t, torch.Tensor) and t.dim() > 0 else [] for t in inputs]
    info = describe(model, graph, list(inputs), dynamic, {})
    return Explanation([report_for(0, plan(model, graph, info))], 0, "unicache.torch.compile (torch.fx)")

