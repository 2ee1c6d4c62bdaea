"""Rewrites of a captured FX graph into ops unicache's IR has, before lowering:

  scaled dot-product attention  F.scaled_dot_product_attention(q, k, v, mask,
                                scale, is_causal), on a GPU, as one
                                attention(q, k, v, bias, scale, causal, layout)
                                node (the IR's Attention: no scores in memory);
                                where q, k and v are each a projection viewed per
                                head with heads and sequence swapped, and the
                                result is swapped back, those swaps go and the
                                node reads and writes [B, L, H, D] (layout blhd).
                                On the CPU (oneDNN's matmul is the fast path there)
                                as MatMul(q, k^T) * scale (+ the mask as an
                                additive bias), Softmax, MatMul with v: FX nodes
                                torch could run as they are, which lowering maps
                                to unicache partitions;
  RMSNorm written out           weight * (x * rsqrt(x.pow(2).mean(-1, keepdim=True)
                                + eps)) (Llama's, with its float32 conversions) as
                                rms_norm(x, weight, eps): one op;
  GELU written out             0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 *
                                x**3))) (GPT-2's "gelu_new") as F.gelu(x,
                                approximate="tanh"): one op, fused into the GEMM
                                before it unless a torch view stands between.

Each rewrite gives the nodes it adds their TensorInfo, so lowering sees them
as it sees dynamo's or torch.fx's. A node a rewrite cannot take (grouped-query
heads, dropout) stays as it was.
"""
from __future__ import annotations

import math
import operator
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.fx
import torch.nn.functional as F

from ._capture import TensorInfo, broadcast

SDPA_FUNCTIONS = {getattr(F, "scaled_dot_product_attention", None), getattr(torch._C._nn, "scaled_dot_product_attention", None)}
SDPA_FUNCTIONS.discard(None)
SDPA_FUNCTIONS_ARGS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


def attention_bias(q: torch.Tensor, k: torch.Tensor, mask: Optional[torch.Tensor], is_causal: bool) -> torch.Tensor:
    """The additive float32 bias that sdpa's mask and causal flag amount to, shaped to
    broadcast over the scores read as [batch * heads, L, S]: [L, S] when it does not
    change over batch and heads, else the scores' full leading dims."""
    length, source = q.shape[-2], k.shape[-2]
    bias = torch.zeros((length, source), dtype=torch.float32, device=q.device)
    if is_causal:
        bias.masked_fill_(torch.ones((length, source), dtype=torch.bool, device=q.device).triu_(1), float("-inf"))
    if mask is not None:
        if mask.dtype == torch.bool:
            bias = torch.where(mask, bias, torch.tensor(float("-inf"), dtype=torch.float32, device=q.device))
        else:
            bias = bias + mask.to(torch.float32)
    return bias.expand(_bias_shape(tuple(bias.shape), tuple(q.shape))).contiguous()


def _bias_shape(bias: Tuple[int, ...], q: Tuple[int, ...]) -> Tuple[int, ...]:
    lead = bias[:-2]
    if len(bias) <= 2 or all(d == 1 for d in lead):
        return bias
    return tuple(q[:-2]) + tuple(bias[-2:])


def _bias_info(q: TensorInfo, k: TensorInfo, mask: Optional[TensorInfo]) -> TensorInfo:
    def one(qs: Sequence[int], ks: Sequence[int], ms: Optional[Sequence[int]]) -> Tuple[int, ...]:
        shape: Tuple[int, ...] = (qs[-2], ks[-2])
        if ms is not None:
            shape = broadcast(ms, shape)
        return _bias_shape(shape, tuple(qs))
    return TensorInfo(one(q.shape, k.shape, mask.shape if mask else None),
                      one(q.other_shape, k.other_shape, mask.other_shape if mask else None), torch.float32, q.device)


def rewrite(graph: torch.fx.Graph, info: Dict[torch.fx.Node, Optional[TensorInfo]],
            device: Optional[torch.device] = None) -> None:
    """Applies the rewrites above to `graph` in place, adding to `info`; attention
    is one node where `device` is a GPU."""
    biases: Dict[Tuple[Any, ...], torch.fx.Node] = {}
    fused = device is not None and device.type == "cuda"
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target in SDPA_FUNCTIONS:
            if not (fused and _fused_attention(graph, info, node, biases)):
                _attention(graph, info, node, biases)
        elif _is_mul(node):
            _gelu_tanh(graph, info, node) or _rms_norm(graph, info, node)


# Attention's layouts (unicache.AttentionLayout's values).
BHLD, BLHD = 0, 1
# The largest head size the GPU kernel takes (kAttentionMaxHeadSize).
MAX_HEAD_SIZE = 128


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: Optional[torch.Tensor], scale: float,
              causal: bool, layout: int) -> torch.Tensor:
    """The IR's Attention in torch (what runs if lowering leaves the node to torch):
    softmax(scale * q k^T + bias, causal) v, q [B, L, H, D] in layout BLHD."""
    if layout == BLHD:
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if causal and bias is not None:  # sdpa takes one or the other
        hidden = torch.ones((q.shape[-2], k.shape[-2]), dtype=torch.bool, device=q.device).triu_(1)
        bias, causal = bias + torch.zeros(hidden.shape, device=q.device).masked_fill_(hidden, float("-inf")), False
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, is_causal=causal, scale=scale)
    return out.transpose(1, 2) if layout == BLHD else out


def additive_mask(mask: torch.Tensor) -> torch.Tensor:
    """sdpa's attn_mask as the additive float32 bias Attention reads, at the mask's
    shape (a boolean mask: 0 where True, -inf where False)."""
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=torch.float32, device=mask.device).masked_fill_(~mask, float("-inf"))
    return mask.to(torch.float32)


def _heads_swapped(node: Any) -> Optional[torch.fx.Node]:
    """x when `node` is x.transpose(1, 2) (or permute(0, 2, 1, 3)) of a rank-4 x."""
    if not isinstance(node, torch.fx.Node) or node.kwargs:
        return None
    args = node.args
    if (node.op == "call_method" and node.target == "transpose" or
            node.op == "call_function" and node.target is torch.transpose) and len(args) == 3:
        if {d % 4 if isinstance(d, int) else d for d in args[1:]} == {1, 2}:
            return args[0] if isinstance(args[0], torch.fx.Node) else None
    if node.op == "call_method" and node.target == "permute" or \
            node.op == "call_function" and node.target is torch.permute:
        dims = args[1:] if not (len(args) == 2 and isinstance(args[1], (tuple, list))) else args[1]
        if [d % 4 if isinstance(d, int) else d for d in dims] == [0, 2, 1, 3]:
            return args[0] if isinstance(args[0], torch.fx.Node) else None
    return None


def _fused_attention(graph: torch.fx.Graph, info: Dict[torch.fx.Node, Optional[TensorInfo]], node: torch.fx.Node,
                     biases: Dict[Tuple[Any, ...], torch.fx.Node]) -> bool:
    """sdpa as one attention node (see the module's docstring); False leaves it as it is."""
    given = dict(zip(SDPA_FUNCTIONS_ARGS, node.args))
    given.update(node.kwargs)
    if set(given) - set(SDPA_FUNCTIONS_ARGS) or given.get("enable_gqa", False) is not False:
        return False
    q, k, v, mask = given.get("query"), given.get("key"), given.get("value"), given.get("attn_mask")
    qi, ki, vi = (info.get(x) if isinstance(x, torch.fx.Node) else None for x in (q, k, v))
    out = info.get(node)
    scale, causal, dropout = given.get("scale"), given.get("is_causal", False), given.get("dropout_p", 0.0)
    if qi is None or ki is None or vi is None or out is None or qi.rank not in (3, 4):
        return False
    if dropout != 0.0 or not isinstance(causal, bool) or (scale is not None and not isinstance(scale, (int, float))):
        return False
    if scale is not None and (scale == 0 or not math.isfinite(scale)):
        return False
    if any(t.dtype != torch.float32 or t.rank != qi.rank for t in (ki, vi)):
        return False
    if not (qi.shape[:-2] == ki.shape[:-2] == vi.shape[:-2] and qi.other_shape[:-2] == ki.other_shape[:-2]
            == vi.other_shape[:-2]):
        return False  # grouped-query heads (k and v fewer than q): the decomposition's, or torch's
    heads = {qi.shape[-1], qi.other_shape[-1], ki.shape[-1], ki.other_shape[-1]}
    values = {vi.shape[-1], vi.other_shape[-1]}
    if len(heads) != 1 or len(values) != 1 or max(heads | values) > MAX_HEAD_SIZE:
        return False
    bias = None
    if mask is not None:
        mi = info.get(mask) if isinstance(mask, torch.fx.Node) else None
        if mi is None or mi.dtype not in (torch.bool, torch.float32) or mi.rank > qi.rank:
            return False
        for qs, ks, ms in ((qi.shape, ki.shape, mi.shape), (qi.other_shape, ki.other_shape, mi.other_shape)):
            scores = tuple(qs[:-1]) + (ks[-2],)
            if broadcast(ms, scores) != scores:
                return False
        bias = mask
        if mi.dtype == torch.bool:
            bias = biases.get(("additive", mask))
            if bias is None:
                with graph.inserting_before(node):
                    bias = graph.call_function(additive_mask, (mask,))
                info[bias] = TensorInfo(mi.shape, mi.other_shape, torch.float32, mi.device)
                biases[("additive", mask)] = bias
    sources = [_heads_swapped(x) for x in (q, k, v)]
    users = list(node.users)
    swap_back = users[0] if len(users) == 1 and _heads_swapped(users[0]) is node else None
    blhd = qi.rank == 4 and swap_back is not None and all(s is not None and info.get(s) is not None for s in sources)
    replaced = swap_back if blhd else node
    with graph.inserting_before(replaced):
        fused = graph.call_function(attention, (*(sources if blhd else (q, k, v)), bias,
                                                None if scale is None else float(scale), causal, BLHD if blhd else BHLD))
    info[fused] = info.get(replaced)
    replaced.replace_all_uses_with(fused)
    graph.erase_node(replaced)
    if blhd:
        graph.erase_node(node)
        for swap in {q, k, v}:  # the swaps nothing else reads
            if isinstance(swap, torch.fx.Node) and not swap.users:
                graph.erase_node(swap)
    return True


def _attention(graph: torch.fx.Graph, info: Dict[torch.fx.Node, Optional[TensorInfo]], node: torch.fx.Node,
               biases: Dict[Tuple[Any, ...], torch.fx.Node]) -> None:
    given = dict(zip(SDPA_FUNCTIONS_ARGS, node.args))
    given.update(node.kwargs)
    if set(given) - set(SDPA_FUNCTIONS_ARGS):
        return
    q, k, v, mask = given.get("query"), given.get("key"), given.get("value"), given.get("attn_mask")
    qi, ki, vi = (info.get(x) if isinstance(x, torch.fx.Node) else None for x in (q, k, v))
    mi = info.get(mask) if isinstance(mask, torch.fx.Node) else None
    out = info.get(node)
    scale, causal, dropout = given.get("scale"), given.get("is_causal", False), given.get("dropout_p", 0.0)
    if qi is None or ki is None or vi is None or out is None or qi.rank < 3:
        return
    if dropout != 0.0 or not isinstance(causal, bool) or (scale is not None and not isinstance(scale, (int, float))):
        return  # dropout, or a scale computed in the model: torch's
    if mask is not None and (mi is None or not isinstance(mask, torch.fx.Node)):
        return
    if not (qi.shape[:-2] == ki.shape[:-2] == vi.shape[:-2] and qi.other_shape[:-2] == ki.other_shape[:-2]):
        return  # grouped-query heads (k and v fewer than q): torch's
    if qi.shape[-1] != ki.shape[-1] or any(t.dtype != torch.float32 for t in (qi, ki, vi)):
        return
    scale = float(scale) if scale is not None else 1.0 / math.sqrt(qi.shape[-1])
    rank = qi.rank
    scores_info = TensorInfo(qi.shape[:-1] + (ki.shape[-2],), qi.other_shape[:-1] + (ki.other_shape[-2],),
                             torch.float32, qi.device)
    with graph.inserting_before(node):
        key_t = graph.call_method("transpose", (k, rank - 2, rank - 1))
        info[key_t] = TensorInfo(ki.shape[:-2] + (ki.shape[-1], ki.shape[-2]),
                                 ki.other_shape[:-2] + (ki.other_shape[-1], ki.other_shape[-2]), ki.dtype, ki.device)
        scores = graph.call_function(torch.matmul, (q, key_t))
        info[scores] = scores_info
        scaled = graph.call_function(operator.mul, (scores, scale))
        info[scaled] = scores_info
        if mask is not None or causal:
            key = (mask, causal, qi.shape[:-2], qi.other_shape[:-2], ki.shape[-2], ki.other_shape[-2])
            bias = biases.get(key)
            if bias is None:
                bias = graph.call_function(attention_bias, (q, k, mask, causal))
                info[bias] = _bias_info(qi, ki, mi)
                biases[key] = bias
            scaled = graph.call_function(operator.add, (scaled, bias))
            info[scaled] = scores_info
        probs = graph.call_function(torch.softmax, (scaled, -1))
        info[probs] = scores_info
        context = graph.call_function(torch.matmul, (probs, v))
        info[context] = out
    node.replace_all_uses_with(context)
    graph.erase_node(node)


def _is_mul(node: torch.fx.Node) -> bool:
    return (node.op == "call_function" and node.target in (operator.mul, torch.mul)) or \
        (node.op == "call_method" and node.target == "mul")


def _is_add(node: Any) -> bool:
    return isinstance(node, torch.fx.Node) and ((node.op == "call_function" and node.target in (operator.add, torch.add))
                                                or (node.op == "call_method" and node.target == "add")) \
        and len(node.args) == 2 and not node.kwargs


def _operands(node: Any, test: Any) -> Optional[Tuple[Any, Any]]:
    """(a, b) of a two-operand node that passes `test`, else None."""
    if not isinstance(node, torch.fx.Node) or not test(node) or len(node.args) != 2 or node.kwargs:
        return None
    return node.args[0], node.args[1]


def _number_times(node: Any, value: float) -> Optional[Any]:
    """x when node is value * x or x * value (a number close to `value`)."""
    pair = _operands(node, _is_mul)
    if pair is None:
        return None
    for a, b in (pair, pair[::-1]):
        if isinstance(a, (int, float)) and not isinstance(a, bool) and math.isclose(a, value, rel_tol=1e-6) \
                and isinstance(b, torch.fx.Node):
            return b
    return None


def _is_cube_of(node: Any, x: torch.fx.Node) -> bool:
    if not isinstance(node, torch.fx.Node):
        return False
    if node.op == "call_function" and node.target in (torch.pow, operator.pow) or \
            node.op == "call_method" and node.target == "pow":
        return len(node.args) == 2 and node.args[0] is x and node.args[1] in (3, 3.0) and not node.kwargs
    return False


def _gelu_tanh(graph: torch.fx.Graph, info: Dict[torch.fx.Node, Optional[TensorInfo]], node: torch.fx.Node) -> bool:
    """node = (0.5 * x) * (1 + tanh(c * (x + 0.044715 * x**3))), c = sqrt(2/pi), in any
    operand order: replaced by gelu(x, approximate="tanh") when nothing else reads the
    pieces."""
    pair = _operands(node, _is_mul)
    if pair is None:
        return False
    for half, one_plus in (pair, pair[::-1]):
        x = _number_times(half, 0.5)
        added = _operands(one_plus, _is_add)
        if x is None or added is None:
            continue
        tanh = next((a for a, b in (added, added[::-1]) if b in (1, 1.0) and isinstance(a, torch.fx.Node)), None)
        if tanh is None or not (tanh.op == "call_function" and tanh.target is torch.tanh or
                                tanh.op == "call_method" and tanh.target == "tanh") or len(tanh.args) != 1:
            continue
        inner = _number_times(tanh.args[0], math.sqrt(2.0 / math.pi))
        inner_pair = _operands(inner, _is_add)
        if inner_pair is None:
            continue
        for base, cubic in (inner_pair, inner_pair[::-1]):
            cube = _number_times(cubic, 0.044715)
            if base is x and _is_cube_of(cube, x):
                pieces = [half, one_plus, tanh, tanh.args[0], inner, cubic, cube]
                inside = set(pieces) | {node}
                if any(u not in inside for p in pieces for u in p.users):
                    return False  # a piece read elsewhere: keep it as it is
                with graph.inserting_before(node):
                    gelu = graph.call_function(F.gelu, (x,), {"approximate": "tanh"})
                info[gelu] = info.get(node)
                node.replace_all_uses_with(gelu)
                for p in [node] + pieces:
                    graph.erase_node(p)
                return True
    return False


def rms_norm(x: torch.Tensor, weight: Optional[torch.Tensor], eps: float) -> torch.Tensor:
    """RMSNorm over the last axis, as a model writes it out (what torch runs when
    lowering leaves the rewritten node to it)."""
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y if weight is None else weight * y


def _is_method(node: Any, name: str) -> bool:
    return isinstance(node, torch.fx.Node) and node.op == "call_method" and node.target == name


def _same_f32(node: Any, info: Dict[torch.fx.Node, Optional[TensorInfo]]) -> Any:
    """The node under .to(float32) / .float() conversions of a float32 value to itself."""
    while _is_method(node, "to") or _is_method(node, "float"):
        source = node.args[0]
        ti, si = info.get(node), info.get(source) if isinstance(source, torch.fx.Node) else None
        if ti is None or si is None or ti.dtype != torch.float32 or si.dtype != torch.float32 or \
                len(node.users) != 1 or node.kwargs.get("copy"):
            break
        node = source
    return node


def _mean_square_of(node: Any) -> Optional[Tuple[Any, List[torch.fx.Node]]]:
    """(x, pieces) when node is x.pow(2).mean(-1, keepdim=True) (or x * x)."""
    if not (isinstance(node, torch.fx.Node) and (_is_method(node, "mean") or
                                                 node.op == "call_function" and node.target is torch.mean)):
        return None
    given = dict(zip(("input", "dim", "keepdim"), node.args))
    given.update(node.kwargs)
    dim = given.get("dim")
    if dim not in (-1, [-1], (-1,)) or given.get("keepdim") is not True or set(given) - {"input", "dim", "keepdim"}:
        return None
    square = given.get("input")
    if isinstance(square, torch.fx.Node) and (_is_method(square, "pow") or
                                               square.op == "call_function" and square.target in (torch.pow, operator.pow)):
        if len(square.args) == 2 and square.args[1] == 2 and not square.kwargs:
            return square.args[0], [node, square]
    pair = _operands(square, _is_mul)
    if pair is not None and pair[0] is pair[1]:
        return pair[0], [node, square]
    return None


def _rms_norm(graph: torch.fx.Graph, info: Dict[torch.fx.Node, Optional[TensorInfo]], node: torch.fx.Node) -> bool:
    """node = x * rsqrt(mean(x^2, -1) + eps), or weight * that (a parameter of the row's
    length, through float32-to-float32 conversions), as rms_norm(x, weight, eps)."""
    pair = _operands(node, _is_mul)
    if pair is None:
        return False
    for weight, scaled in (pair, pair[::-1]):  # weight * rms_norm(x, None, eps), rewritten before
        inner = _same_f32(scaled, info)
        if isinstance(weight, torch.fx.Node) and weight.op == "get_attr" and isinstance(inner, torch.fx.Node) \
                and inner.op == "call_function" and inner.target is rms_norm and inner.args[1] is None \
                and len(inner.users) == 1 and info.get(weight) is not None and info[weight].rank == 1:
            x, _, eps = inner.args
            with graph.inserting_before(node):
                fused = graph.call_function(rms_norm, (x, weight, eps))
            info[fused] = info.get(node)
            node.replace_all_uses_with(fused)
            graph.erase_node(node)
            for dead in _chain(scaled, inner):
                graph.erase_node(dead)
            return True
    for x, root in (pair, pair[::-1]):
        if not (isinstance(root, torch.fx.Node) and (_is_method(root, "rsqrt") or root.op == "call_function"
                                                      and root.target is torch.rsqrt)) or len(root.args) != 1:
            continue
        added = _operands(root.args[0], _is_add)
        if added is None:
            continue
        for mean, eps in (added, added[::-1]):
            found = _mean_square_of(mean)
            if found is None or found[0] is not x or not isinstance(eps, (int, float)) or isinstance(eps, bool):
                continue
            pieces = [root, root.args[0]] + found[1]
            inside = set(pieces) | {node}
            if any(u not in inside for p in pieces for u in p.users):
                return False
            with graph.inserting_before(node):
                fused = graph.call_function(rms_norm, (x, None, float(eps)))
            info[fused] = info.get(node)
            node.replace_all_uses_with(fused)
            graph.erase_node(node)
            for p in pieces:
                graph.erase_node(p)
            return True
    return False


def _chain(top: torch.fx.Node, bottom: torch.fx.Node) -> List[torch.fx.Node]:
    """The conversion nodes from `top` down to and including `bottom`, users first."""
    out = []
    node = top
    while node is not bottom:
        out.append(node)
        node = node.args[0]
    return out + [bottom]
