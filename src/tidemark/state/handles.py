"""User-facing state handles (Flink's ValueState, ListState...), written once over StateTable.

A handle is returned by ``backend.get_state(descriptor)`` and lives as long as the backend. It
reads and writes the state of the backend's current key in the handle's current namespace:
``None`` (the default namespace) until ``set_current_namespace`` scopes it to another, a window
for instance (:mod:`tidemark.windows`). A namespace is any value the default serializer encodes
(``None``, numbers, strings, bytes, tuples...) and is hashable; the same key has independent
state in each namespace. List, reducing and aggregating state can merge namespaces
(:meth:`MergingState.merge_namespaces`, Flink's ``InternalMergingState``), which is how session
windows merge. TTL rules live here, in one place; so does merging, for every backend.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

from tidemark.state.descriptors import StateDescriptor
from tidemark.state.table import MISSING, StateTable
from tidemark.state.ttl import Clock, is_expired


class State:
    """Base of every handle: namespace, ``clear()`` and the TTL helpers."""

    __slots__ = ("_table", "_ns", "_ttl", "_ttl_ms", "_clock", "descriptor")

    def __init__(self, table: StateTable, descriptor: StateDescriptor, clock: Clock) -> None:
        self._table = table
        self.descriptor = descriptor
        self._ns = table.namespace_token(None)
        self._ttl = descriptor.ttl
        self._ttl_ms = descriptor.ttl.ttl_ms if descriptor.ttl else 0
        self._clock = clock

    def set_current_namespace(self, namespace: Any) -> None:
        """Scope later calls to ``namespace`` (e.g. a window); ``None`` is the default."""
        self._ns = self._table.namespace_token(namespace)

    def clear(self) -> None:
        """Remove the state of the current key in the current namespace."""
        self._table.delete(self._ns)

    def _wrap(self, value: Any) -> Any:
        return value if self._ttl is None else (value, self._clock.now_ms())

    def _read_single(self, stored: Any) -> Any:
        """TTL check of a single stored value; may clear it or refresh its timestamp."""
        now = self._clock.now_ms()
        ttl = self._ttl
        if is_expired(stored[1], self._ttl_ms, now):
            self._table.delete(self._ns)
            return stored[0] if ttl.return_expired else MISSING  # type: ignore[union-attr]
        if ttl.update_on_read:  # type: ignore[union-attr]
            self._table.put(self._ns, (stored[0], now))
        return stored[0]

    def _current(self) -> Any:
        stored = self._table.get(self._ns)
        if stored is MISSING or self._ttl is None:
            return stored
        return self._read_single(stored)


class ValueState(State):
    """One value; reads the descriptor's default when empty."""

    __slots__ = ("_default",)

    def __init__(self, table: StateTable, descriptor: Any, clock: Clock) -> None:
        super().__init__(table, descriptor, clock)
        self._default = descriptor.default

    def value(self) -> Any:
        stored = self._table.get(self._ns)
        if stored is MISSING:
            return self._default
        if self._ttl is None:
            return stored
        result = self._read_single(stored)
        return self._default if result is MISSING else result

    def is_empty(self) -> bool:
        """True when no value is stored (or it expired): ``value()`` reads the default."""
        return self._current() is MISSING

    def update(self, value: Any) -> None:
        """Set the value; ``None`` clears it (as in Flink)."""
        if value is None:
            self._table.delete(self._ns)
        elif self._ttl is None:
            self._table.put(self._ns, value)
        else:
            self._table.put(self._ns, (value, self._clock.now_ms()))


class MergingState(State):
    """A state whose values of several namespaces merge into one (list, reducing, aggregating)."""

    __slots__ = ()

    def merge_namespaces(self, target: Any, sources: Iterable[Any]) -> None:
        """Merge the current key's state in each namespace of ``sources`` into ``target`` and
        clear it in the sources (``target`` among them is left out). A list appends the sources'
        elements after the target's; a reducing state reduces ``(target, sources)``; an
        aggregating state merges the accumulators (``aggregate_function.merge``). Expired TTL
        values take no part; a merged reducing or aggregating value gets a new TTL timestamp,
        list elements keep theirs. The current namespace is unchanged."""
        current = self._ns
        try:
            merged = MISSING
            for namespace in sources:
                if namespace == target:
                    continue
                self._ns = self._table.namespace_token(namespace)
                value = self._mergeable()
                if value is MISSING:
                    continue
                self._table.delete(self._ns)
                merged = value if merged is MISSING else self._merge(merged, value)
            if merged is not MISSING:
                self._ns = self._table.namespace_token(target)
                value = self._mergeable()
                self._write_merged(merged if value is MISSING else self._merge(value, merged))
        finally:
            self._ns = current

    def _mergeable(self) -> Any:
        """The live value of the current namespace in the form ``_merge`` takes, or ``MISSING``."""
        return self._current()

    def _merge(self, first: Any, second: Any) -> Any:
        raise NotImplementedError

    def _write_merged(self, value: Any) -> None:
        self._table.put(self._ns, self._wrap(value))


class ListState(MergingState):
    """A list; ``get()`` of an empty list state is ``[]``."""

    __slots__ = ()

    def _mergeable(self) -> Any:
        """The stored elements (with their TTL timestamps), the expired ones left out."""
        stored = self._table.get(self._ns)
        if stored is MISSING or self._ttl is None:
            return stored
        now = self._clock.now_ms()
        live = [e for e in stored if not is_expired(e[1], self._ttl_ms, now)]
        return live if live else MISSING

    def _merge(self, first: Any, second: Any) -> Any:
        return [*first, *second]

    def _write_merged(self, value: Any) -> None:
        self._table.put(self._ns, value)

    def get(self) -> list[Any]:
        stored = self._table.get(self._ns)
        if stored is MISSING:
            return []
        if self._ttl is None:
            return list(stored)
        return self._read_elements(stored)

    def _read_elements(self, stored: list[tuple[Any, int]]) -> list[Any]:
        now = self._clock.now_ms()
        live = [e for e in stored if not is_expired(e[1], self._ttl_ms, now)]
        visible = stored if self._ttl.return_expired else live  # type: ignore[union-attr]
        result = [e[0] for e in visible]
        if self._ttl.update_on_read:  # type: ignore[union-attr]
            live = [(e[0], now) for e in live]
        elif len(live) == len(stored):
            return result
        if live:
            self._table.put(self._ns, live)
        else:
            self._table.delete(self._ns)
        return result

    def add(self, value: Any) -> None:
        if value is None:
            raise ValueError("ListState.add(None): null elements are not allowed")
        self._table.append(self._ns, [self._wrap(value)])

    def add_all(self, values: Iterable[Any]) -> None:
        values = list(values)
        if any(v is None for v in values):
            raise ValueError("ListState.add_all: null elements are not allowed")
        if values:
            self._table.append(self._ns, [self._wrap(v) for v in values])

    def update(self, values: Iterable[Any]) -> None:
        """Replace the list; an empty list clears the state."""
        values = list(values)
        if any(v is None for v in values):
            raise ValueError("ListState.update: null elements are not allowed")
        if values:
            self._table.put(self._ns, [self._wrap(v) for v in values])
        else:
            self._table.delete(self._ns)


class MapState(State):
    """A map of user keys to values; TTL applies per entry."""

    __slots__ = ()

    def _entry(self, key: Any) -> Any:
        stored = self._table.get_entry(self._ns, key)
        if stored is MISSING or self._ttl is None:
            return stored
        now = self._clock.now_ms()
        if is_expired(stored[1], self._ttl_ms, now):
            self._table.delete_entry(self._ns, key)
            return stored[0] if self._ttl.return_expired else MISSING
        if self._ttl.update_on_read:
            self._table.put_entry(self._ns, key, (stored[0], now))
        return stored[0]

    def get(self, key: Any) -> Any:
        value = self._entry(key)
        return None if value is MISSING else value

    def contains(self, key: Any) -> bool:
        return self._entry(key) is not MISSING

    def put(self, key: Any, value: Any) -> None:
        self._table.put_entry(self._ns, key, self._wrap(value))

    def put_all(self, mapping: dict[Any, Any]) -> None:
        for key, value in mapping.items():
            self._table.put_entry(self._ns, key, self._wrap(value))

    def remove(self, key: Any) -> None:
        self._table.delete_entry(self._ns, key)

    def items(self) -> Iterator[tuple[Any, Any]]:
        entries = list(self._table.entries(self._ns))
        if self._ttl is None:
            return iter(entries)
        return iter(self._visible_items(entries))

    def _visible_items(self, entries: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
        now = self._clock.now_ms()
        ttl = self._ttl
        result = []
        for key, stored in entries:
            if is_expired(stored[1], self._ttl_ms, now):
                self._table.delete_entry(self._ns, key)
                if not ttl.return_expired:  # type: ignore[union-attr]
                    continue
            elif ttl.update_on_read:  # type: ignore[union-attr]
                self._table.put_entry(self._ns, key, (stored[0], now))
            result.append((key, stored[0]))
        return result

    def keys(self) -> Iterator[Any]:
        return (k for k, _ in self.items())

    def values(self) -> Iterator[Any]:
        return (v for _, v in self.items())

    def is_empty(self) -> bool:
        return next(self.items(), None) is None


class ReducingState(MergingState):
    """Folds added values with the descriptor's ``reduce_function``; empty reads ``None``."""

    __slots__ = ()

    def _merge(self, first: Any, second: Any) -> Any:
        return self.descriptor.reduce_function(first, second)  # type: ignore[union-attr]

    def get(self) -> Any:
        value = self._current()
        return None if value is MISSING else value

    def add(self, value: Any) -> None:
        current = self._current()
        if current is not MISSING:
            value = self.descriptor.reduce_function(current, value)  # type: ignore[union-attr]
        self._table.put(self._ns, self._wrap(value))


class AggregatingState(MergingState):
    """Keeps an accumulator of the descriptor's ``aggregate_function``; empty reads ``None``."""

    __slots__ = ()

    def _merge(self, first: Any, second: Any) -> Any:
        return self.descriptor.aggregate_function.merge(first, second)  # type: ignore[union-attr]

    def get(self) -> Any:
        accumulator = self._current()
        if accumulator is MISSING:
            return None
        return self.descriptor.aggregate_function.get_result(accumulator)  # type: ignore[union-attr]

    def add(self, value: Any) -> None:
        function = self.descriptor.aggregate_function  # type: ignore[union-attr]
        accumulator = self._current()
        if accumulator is MISSING:
            accumulator = function.create_accumulator()
        self._table.put(self._ns, self._wrap(function.add(value, accumulator)))
