"""Copy-on-write per key group: the heap's consistent view for an asynchronous snapshot (Flink's
``CopyOnWriteStateMap``, at the grain of a key group).

A heap table (and a heap timer queue) keeps one dict per key group. A snapshot's synchronous part
captures the dicts themselves (:meth:`KeyGroupMaps.capture`: a list of references, no copy);
its asynchronous part serializes them on another thread while the task keeps processing. While
any capture is pending, the live structure never changes what a capture holds:

- the first write into a key group's dict replaces the dict by a shallow copy that the live
  structure owns (:meth:`KeyGroupMaps.writable`);
- the first access to a stored object that can change in place (a list state's list, a map
  state's dict, a timer's set of timestamps, a mutable value such as an accumulator) replaces it
  by a copy in the owned dict (:meth:`KeyGroupMaps.owned`), so neither the table nor the user,
  who gets the object from a read, can mutate the captured one.

Once the asynchronous part released its capture (:meth:`KeyGroupMaps.release`), writes go in
place again. Captures are taken on the processing thread and released in any order from any
thread; a capture costs one list of references per structure whatever the state's size.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

_IMMUTABLE = frozenset({int, float, str, bytes, bool, type(None), complex, frozenset})


def may_change(stored: Any) -> bool:
    """True when ``stored`` can be changed in place (so a capture must not share it)."""
    kind = type(stored)
    if kind in _IMMUTABLE:
        return False
    if kind is tuple:
        return any(may_change(item) for item in stored)
    return True


class KeyGroupMaps:
    """``maps[key-group index]`` -> dict, with copy-on-write captures (see the module)."""

    __slots__ = ("maps", "pending", "_made", "_owned", "_captures", "_lock")

    def __init__(self, count: int) -> None:
        self.maps: list[dict[Any, Any]] = [{} for _ in range(count)]
        """The live dicts; read them directly, write through :meth:`writable` or :meth:`owned`."""
        self._made = [0] * count  # the number of captures taken when each live dict was made
        self._owned: list[set[Any]] = [set() for _ in range(count)]  # slots copied since then
        self.pending = 0
        """Captures taken and not released: while not 0, write through :meth:`writable` and
        :meth:`owned` (a plain attribute: the hot paths read it on every access)."""
        self._captures = 0
        self._lock = threading.Lock()

    def capture(self) -> list[dict[Any, Any]]:
        """The dicts as they are now, for a snapshot; :meth:`release` them once written."""
        with self._lock:
            self._captures += 1
            self.pending += 1
        return list(self.maps)

    def release(self) -> None:
        with self._lock:
            self.pending -= 1

    def writable(self, index: int) -> dict[Any, Any]:
        """The live dict of key group ``index``, copied first if a pending capture holds it."""
        if self.pending and self._made[index] < self._captures:
            self.maps[index] = live = dict(self.maps[index])
            self._made[index] = self._captures
            self._owned[index] = set()
            return live
        return self.maps[index]

    def owned(self, index: int, slot: Any, copy: Callable[[Any], Any]) -> dict[Any, Any]:
        """:meth:`writable`, with the object stored at ``slot`` replaced by ``copy(object)`` the
        first time it is reached while a capture is pending (slots written since count as copied)."""
        live = self.writable(index)
        if self.pending:
            owned = self._owned[index]
            if slot not in owned:
                owned.add(slot)
                stored = live.get(slot)
                if stored is not None:
                    live[slot] = copy(stored)
        return live

    def replaced(self, index: int, slot: Any) -> dict[Any, Any]:
        """:meth:`writable`, for a write that replaces the object at ``slot`` (nothing to copy)."""
        live = self.writable(index)
        if self.pending:
            self._owned[index].add(slot)
        return live
