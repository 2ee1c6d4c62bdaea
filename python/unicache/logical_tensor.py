"""Logical tensors: a tensor of a graph as the C interface describes it (its id,
shape and constness), what graphs, compiled partitions and tensors with data
all refer to.
"""
from __future__ import annotations

import ctypes as C
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

from . import _abi


@dataclass(frozen=True)
class LogicalTensor:
    """A tensor of a graph (f32): its id, its shape (-1: known when compiling) and
    whether it is a constant (a weight, packed once and reused)."""

    id: int
    shape: Tuple[int, ...]
    is_constant: bool = False

    @property
    def ndims(self) -> int:
        return len(self.shape)

    @classmethod
    def _from_struct(cls, s: _abi.LogicalTensorStruct) -> "LogicalTensor":
        return cls(int(s.id), tuple(int(s.dims[i]) for i in range(s.ndims)), bool(s.is_constant))

    def _to_struct(self, shape: Optional[Sequence[int]] = None) -> _abi.LogicalTensorStruct:
        dims = self.shape if shape is None else shape
        s = _abi.LogicalTensorStruct(self.id, len(dims), (C.c_int64 * _abi.MAX_NDIMS)(), int(self.is_constant))
        for i, d in enumerate(dims):
            s.dims[i] = d
        return s

    def __str__(self) -> str:
        return f"tensor {self.id} {list(self.shape)}" + (" constant" if self.is_constant else "")
