"""What the PyTorch frontend says when work does not run in unicache: one
warning per cause (FallbackWarning), and counters (statistics()).

Nothing runs silently in torch: a graph the torch.compile backend cannot
compile runs in torch, a call whose inputs do not fit what was compiled runs
the captured graph in torch, dynamo's recaptures and its recompile limit are
counted; the first time each cause is met, one warning line says what and why.
"""
from __future__ import annotations

import logging
import threading
import warnings
from dataclasses import dataclass, fields
from typing import Set


class FallbackWarning(UserWarning):
    """Work that ran in torch (or was captured again) instead of in unicache."""


@dataclass
class FrontendStatistics:
    """Counters of the torch.compile backend in this process (statistics() returns a copy).

    captures: graphs dynamo handed to the backend; recaptures: those that were a
    recompile of a function captured before (dynamo's guards failed);
    graphs_in_torch: captures the backend could not compile, run wholly in torch;
    graphs_without_partitions: captures compiled with nothing for unicache to run;
    calls_in_torch: calls of a compiled capture that ran it in torch (inputs that
    did not fit what was compiled); recompile_limit_hits: functions dynamo gave
    up on (its recompile limit), which it then runs in eager for good;
    backend_ms: time spent in the backend's calls (lowering a capture; dynamo's
    own capture time is not in it); partition_compile_ms: time spent compiling
    partitions for new shapes (compile() lookups and, on a miss, loads or builds).
    """

    captures: int = 0
    recaptures: int = 0
    graphs_in_torch: int = 0
    graphs_without_partitions: int = 0
    calls_in_torch: int = 0
    recompile_limit_hits: int = 0
    backend_ms: float = 0.0
    partition_compile_ms: float = 0.0


_lock = threading.Lock()
_counters = FrontendStatistics()
_said: Set[str] = set()


def statistics() -> FrontendStatistics:
    """A copy of this process's counters."""
    with _lock:
        return FrontendStatistics(**{f.name: getattr(_counters, f.name) for f in fields(_counters)})


def reset_statistics() -> None:
    """Counters to zero, and every cause may be warned about again (tests)."""
    with _lock:
        for f in fields(_counters):
            setattr(_counters, f.name, 0)
        _said.clear()


def add_time(counter: str, ms: float) -> None:
    """Adds `ms` to a time counter."""
    with _lock:
        setattr(_counters, counter, getattr(_counters, counter) + ms)


def count(counter: str, cause: str = "", message: str = "") -> None:
    """Adds one to `counter`; warns with `message` the first time `cause` is met."""
    with _lock:
        setattr(_counters, counter, getattr(_counters, counter) + 1)
        first = bool(cause) and cause not in _said
        if first:
            _said.add(cause)
    if first:
        warnings.warn(message, FallbackWarning, stacklevel=3)


class _RecompileLimitWatch(logging.Filter):
    """Sees dynamo's own line when a function hits its recompile limit (dynamo then runs
    it in eager for the rest of the process) and counts and says it as unicache's."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = str(record.msg)
        if text.startswith("torch._dynamo hit config."):
            try:
                function = str(record.args[2]) if isinstance(record.args, tuple) and len(record.args) > 2 else "?"
            except Exception:  # a record of another shape: still counted
                function = "?"
            count("recompile_limit_hits", f"limit:{function}",
                  f"unicache: torch.compile stopped capturing {function} (dynamo's recompile limit): its "
                  "later calls run in torch eager, not in unicache; see unicache.torch.explain() for the "
                  "recaptures' reasons")
        return True


_watching = False


def watch_recompile_limit() -> None:
    """Installs the watch on dynamo's logger once (import of torch._dynamo needed)."""
    global _watching
    with _lock:
        if _watching:
            return
        _watching = True
    logging.getLogger("torch._dynamo.convert_frame").addFilter(_RecompileLimitWatch())
