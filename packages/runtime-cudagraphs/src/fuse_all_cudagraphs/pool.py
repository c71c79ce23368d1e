"""One CUDA graph memory pool shared by several graphs, and the ordering rule that keeps sharing safe.

Graphs captured into one pool reuse each other's freed memory: the backward graph of a training step can
place its temporaries where the forward graph's temporaries were. The price: memory that graph A used as a
temporary may have become an output of a graph B captured after A. Replaying A then overwrites B's output,
which is harmless only if nobody still reads that output. So before replaying a graph we ask the pool
whether any output of a graph captured *after* it is still referenced ("later" conflicts), and whether the
graph's own previous outputs are ("own" conflicts). Outputs of graphs that were retired (re-captured) stay
tracked while the caller holds them: the memory is still inside the pool.
"""
from __future__ import annotations

import weakref
from typing import Any

from .outputs import OutputPlan, OwnedGroup


class _Record:
    __slots__ = ("name", "outputs", "active")

    def __init__(self, name: str, outputs: OutputPlan):
        self.name = name
        self.outputs = outputs
        self.active = True


class GraphPool:
    """A memory pool for the CUDA graphs of one model (forward + backward), in capture order.

    ``GraphPool()`` makes a new private pool on first capture; ``GraphPool(torch.cuda.graph_pool_handle())``
    or ``GraphPool.of(handle)`` adopts an existing one (the same handle always gives the same GraphPool,
    so the ordering rule sees every graph in it).
    """

    _by_handle: dict[Any, GraphPool] = {}
    _every_pool: weakref.WeakSet[GraphPool] = weakref.WeakSet()

    def __init__(self, handle: Any = None):
        self._handle = handle
        self._records: list[_Record] = []
        self._members: weakref.WeakSet[Any] = weakref.WeakSet()  # the GraphedCallables capturing into it
        GraphPool._every_pool.add(self)

    @classmethod
    def of(cls, pool: GraphPool | Any | None) -> GraphPool:
        if pool is None:
            return cls()
        if isinstance(pool, GraphPool):
            return pool
        key = repr(pool)  # handles are tuples or small handle objects; their repr is their identity
        if key not in cls._by_handle:
            cls._by_handle[key] = cls(pool)
        return cls._by_handle[key]

    @property
    def handle(self) -> Any:
        if self._handle is None:
            from . import _torch_compat as compat

            self._handle = compat.graph_pool_handle()
        return self._handle

    def join(self, member: Any) -> None:
        """``member`` (a GraphedCallable) captures into this pool; ``reset`` retires its graphs."""
        self._members.add(member)

    def reset(self) -> None:
        """Retire every graph captured into this pool and forget the handle: once the caller drops the
        outputs it still holds, the allocator frees the pool's memory. Members capture afresh on their
        next calls, into a new pool."""
        for member in list(self._members):
            member.reset()
        for record in list(self._records):
            self.retire(record)
        self._handle = None

    def register(self, name: str, outputs: OutputPlan) -> _Record:
        """A graph was just captured into this pool: it is the newest."""
        record = _Record(name, outputs)
        self._prune()  # retired graphs whose outputs the caller has dropped since
        self._records.append(record)
        return record

    def retire(self, record: _Record) -> None:
        """The graph will never replay again; its outputs stay tracked while somebody holds them."""
        record.active = False
        record.outputs.release()
        self._prune()

    def _prune(self) -> None:
        self._records = [r for r in self._records if r.active or r.outputs.live_groups()]

    def conflicts(self, record: _Record) -> tuple[list[OwnedGroup], list[tuple[str, OwnedGroup]]]:
        """(own live groups, [(graph name, live group)] of graphs captured after ``record``)."""
        own = record.outputs.live_groups()
        later: list[tuple[str, OwnedGroup]] = []
        seen = False
        for other in self._records:
            if other is record:
                seen = True
            elif seen:
                later.extend((other.name, group) for group in other.outputs.live_groups())
        return own, later

    def owned_storages(self) -> set[int]:
        """Base addresses of the storages that active graphs of this pool write their outputs into."""
        return {group.storage_ptr for r in self._records if r.active for group in r.outputs.groups}

    @classmethod
    def owned_anywhere(cls) -> set[int]:
        """Base addresses of the storages that active graphs of any pool write their outputs into: an
        input found there stays there (its producer replays into it), whichever pool it belongs to."""
        return set().union(*(pool.owned_storages() for pool in list(cls._every_pool)))

    def graph_names(self) -> list[str]:
        """Names of the graphs in capture order (retired ones still holding live outputs included)."""
        return [r.name if r.active else f"{r.name} (retired)" for r in self._records]
