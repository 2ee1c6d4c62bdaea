"""From a captured FX graph and what each node's value is (TensorInfo) to what
runs: the lowered unicache graph, torch's steps and unicache's partitions in
order, and the input checks. Shared by unicache.torch.compile (torch.fx), the
torch.compile backend (dynamo) and explain().
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

import torch
import torch.fx

from ..engine import Engine
from ..errors import InvalidArgument, InvalidTensorType
from ._capture import TensorInfo
from ._decompose import rewrite
from ._lowering import Lowered, Lowerer, mutates
from ._runtime import CompiledModule, PartitionStep, TorchStep, input_specs


@dataclass
class Plan:
    """What lowering decided for one graph (before anything is compiled)."""

    root: torch.nn.Module
    graph: torch.fx.Graph
    info: Dict[torch.fx.Node, Optional[TensorInfo]]
    device: torch.device
    lowered: Lowered
    steps: List[Any]
    placeholders: List[torch.fx.Node]
    output: Any
    refused: List[torch.fx.Node]  # every node lowering left to torch (live or not)

    @property
    def partitions(self) -> int:
        return sum(isinstance(s, PartitionStep) for s in self.steps)


def device_of(info: Dict[torch.fx.Node, Optional[TensorInfo]], graph: torch.fx.Graph) -> torch.device:
    """The device the graph computes on: its floating-point inputs' and attributes' (else
    any input's)."""
    values = [info.get(n) for n in graph.nodes if n.op in ("placeholder", "get_attr")]
    tensors = [v for v in values if v is not None]
    devices = {v.device for v in tensors if v.dtype.is_floating_point} or {v.device for v in tensors}
    if len(devices) > 1 and any(d.type == "cuda" for d in devices):
        # A CUDA model with a CPU scalar among its inputs (dynamo lifts some):
        # the CPU ones stay torch's.
        devices = {d for d in devices if d.type == "cuda"}
    if len(devices) != 1:
        raise InvalidTensorType(f"inputs on several devices, or none: {sorted(str(d) for d in devices)}")
    device = devices.pop()
    if device.type not in ("cpu", "cuda"):
        raise InvalidTensorType(f"device {device}: unicache.torch runs on 'cpu' and 'cuda'")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def plan(root: torch.nn.Module, graph: torch.fx.Graph, info: Dict[torch.fx.Node, Optional[TensorInfo]]) -> Plan:
    """Lowers `root`'s `graph` (whose nodes' values `info` describes) and orders the steps."""
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    device = device_of(info, graph)
    rewrite(graph, info, device)
    lowerer = Lowerer(root, graph, info, device)
    refused, output = [], None
    for node in graph.nodes:
        if node.op == "output":
            output = node.args[0]
        elif node.op != "placeholder" and not lowerer.lower(node):
            refused.append(node)
    # A transpose every reader of which folded it into a MatMul flag is not run.
    folded = lowerer.out.folded
    live_torch = [n for n in refused if not (n in folded and set(n.users) <= folded[n])]
    reads = [a for n in live_torch for a in n.all_input_nodes]
    reads += nodes_in(output)
    lowered = lowerer.finish(reads)
    steps = _steps(root, graph, lowered, live_torch, output)
    return Plan(root, graph, info, device, lowered, steps, placeholders, output, refused)


def build(p: Plan) -> CompiledModule:
    """The plan's CompiledModule (its partitions compile at their first call per shape)."""
    read = {s.node for st in p.steps if isinstance(st, PartitionStep) for s in st.sources}
    feeds = [ph in read for ph in p.placeholders]
    return CompiledModule(p.root, p.lowered, p.steps, p.placeholders, input_specs(p.placeholders, p.info, feeds),
                          p.output, Engine.for_torch_device(p.device), p.device)


def check_inputs(graph: torch.fx.Graph, inputs: Sequence[Any]) -> None:
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(inputs):
        raise InvalidArgument(f"the module takes {len(placeholders)} inputs, example_inputs has {len(inputs)}")


def nodes_in(value: Any) -> List[torch.fx.Node]:
    found: List[torch.fx.Node] = []
    torch.fx.node.map_arg(value, lambda n: found.append(n) or n)
    return found


def _steps(root: torch.nn.Module, graph: torch.fx.Graph, lowered: Lowered, torch_nodes: List[torch.fx.Node],
           output: Any) -> List[Any]:
    """Torch steps and partition steps in the FX order, without the ones nothing needs."""
    by_output: Dict[torch.fx.Node, PartitionStep] = {}
    for part in lowered.graph.partitions:
        node = lowered.produced_by.get(part.outputs[0].id)
        if node is None:
            raise InvalidArgument(f"partition {part.index}: its output is not a node's value (unicache.torch bug)")
        by_output[node] = PartitionStep(part, [lowered.source_of(t.id) for t in part.inputs], node,
                                        lowered.produced[node][1])
    torch_set = set(torch_nodes)
    ordered: List[Any] = []
    for node in graph.nodes:
        if node in torch_set:
            ordered.append(TorchStep(node))
        elif node in by_output:
            ordered.append(by_output[node])
    needed = {lowered.resolve(n) for n in nodes_in(output)}
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
