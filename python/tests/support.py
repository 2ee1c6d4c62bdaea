"""What the package's tests share: engines (or the reason to skip), graphs, numpy references."""
from __future__ import annotations

import functools
import math
import unittest
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

import unicache
from unicache import OpKind

_engines: Dict[str, unicache.Engine] = {}


def _engine(name: str, make: Callable[[], unicache.Engine]) -> unicache.Engine:
    """One engine per backend for the whole run (engine creation probes the device)."""
    if name not in _engines:
        try:
            _engines[name] = make()
        except unicache.Unsupported as e:
            raise unittest.SkipTest(f"no {name} engine: {e.message}") from None
        except unicache.Error as e:
            if name == "cpu":
                raise
            raise unittest.SkipTest(f"no {name} device: {e.message}") from None
    return _engines[name]


def cpu_engine() -> unicache.Engine:
    return _engine("cpu", unicache.Engine.cpu)


def opencl_engine() -> unicache.Engine:
    return _engine("opencl", unicache.Engine.opencl_default)


def random(shape: Sequence[int], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(tuple(shape), dtype=np.float32)


# numpy references of the ops (float64 inside, as the C++ suite's references are exact)
def gelu_erf(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


ELTWISE = {
    OpKind.RELU: lambda x: np.maximum(x, 0),
    OpKind.GELU_ERF: gelu_erf,
    OpKind.GELU_TANH: gelu_tanh,
    OpKind.SIGMOID: lambda x: 1.0 / (1.0 + np.exp(-x)),
    OpKind.TANH: np.tanh,
    OpKind.SOFTMAX: softmax,
    OpKind.SILU: lambda x: x / (1.0 + np.exp(-x)),
}


class MatMulBlock:
    """y = post(x @ W (binary) c): a MatMul with an optional Add or Multiply of a
    constant row and an optional eltwise or softmax, as one graph."""

    def __init__(self, k: int, n: int, binary: Optional[OpKind] = OpKind.ADD,
                 post: Optional[OpKind] = OpKind.RELU) -> None:
        self.k, self.n, self.binary, self.post = k, n, binary, post
        self.graph = g = unicache.Graph()
        self.x, self.w = g.add_tensor([-1, k]), g.add_tensor([k, n], constant=True)
        ins = [self.x, self.w]
        y = g.add_tensor([-1, n])
        g.add_op(OpKind.MATMUL, [self.x, self.w], [y])
        if binary is not None:
            c, z = g.add_tensor([n], constant=True), g.add_tensor([-1, n])
            g.add_op(binary, [y, c], [z])
            ins.append(c)
            y = z
        if post is not None:
            z = g.add_tensor([-1, n])
            g.add_op(post, [y], [z])
            y = z
        g.finalize()
        self.inputs, self.output = ins, y
        self.weights = [random((k, n), 1)] + ([random((n,), 2)] if binary is not None else [])

    @functools.cached_property
    def partition(self) -> unicache.Partition:
        """The one partition (a post-op that is not fused, as Softmax, makes two: use run())."""
        (p,) = self.graph.partitions
        return p

    def run(self, engine: unicache.Engine, stream: unicache.Stream, x: np.ndarray) -> np.ndarray:
        """Compiles every partition for x's shape and runs them in order; the block's output."""
        values = {t.id: a for t, a in zip(self.inputs, [x] + self.weights)}
        for p in self.graph.partitions:
            arrays = [values[t.id] for t in p.inputs]
            cp = p.compile([a.shape for a in arrays], engine)
            values.update(zip([t.id for t in cp.outputs], cp.execute(stream, arrays)))
        return values[self.output.id]

    def shapes(self, m: int) -> List[Tuple[int, ...]]:
        return [(m, self.k)] + [w.shape for w in self.weights]

    def reference(self, x: np.ndarray) -> np.ndarray:
        y = x.astype(np.float64) @ self.weights[0].astype(np.float64)
        if self.binary == OpKind.ADD:
            y = y + self.weights[1]
        elif self.binary == OpKind.MULTIPLY:
            y = y * self.weights[1]
        return ELTWISE[self.post](y) if self.post is not None else y
