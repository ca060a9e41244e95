"""Joins of two keyed inputs, as two-input keyed functions (:class:`~tidemark.api.KeyedCoProcessFunction`)
whose state the watermark keeps bounded.

* :func:`interval_join` (Flink's ``IntervalJoin``): each record of the first input at event time
  ``t`` with each record of the second, of the same key, at ``t'`` with
  ``t + lower_ms <= t' <= t + upper_ms``. Both sides wait in keyed state, by event time, until no
  record of the other side can join them: a first-input record until the watermark reaches
  ``t + upper_ms``, a second-input record until it reaches ``t' - lower_ms`` (records behind the
  watermark never reach the function: the stage's ``late_records``). So what a key keeps is what
  arrived within the bounds plus the watermark's delay, however long the job runs.
* :func:`table_join` (a stream-table join, Flink's event-time temporal join): the second input is
  a table, typically a compacted topic read from its start (:func:`table_decode`: the Kafka key is
  the row's key, a record without a value deletes it); each event of the first input waits until
  the watermark passes its time and is then joined with the row in force at that time (the newest
  version at or before it; ``None`` when there was none or it was deleted; ``inner=True`` drops
  such events). Versions older than the one in force at the watermark are dropped.

Each join emits ``join(first, second)`` (None: nothing) under the key, with the later of the two
event times (the event's in a table join). Lifecycle: as any keyed two-input function; the state
is checkpointed, restored and rescaled with the stage's, timers included.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tidemark.api import KeyedCoProcessFunction, json_decode
from tidemark.state import MapStateDescriptor

Join = Callable[[Any, Any], Any]


def _pair(first: Any, second: Any) -> Any:
    return {"left": first, "right": second}


class IntervalJoin(KeyedCoProcessFunction):
    """See the module; made by :func:`interval_join`."""

    lower_ms = 0
    upper_ms = 0
    join: Join = staticmethod(_pair)
    FIRST = MapStateDescriptor("interval_join_first")  # event time -> the first input's records of it
    SECOND = MapStateDescriptor("interval_join_second")

    def open(self, ctx: Any) -> None:
        self.first = ctx.get_state(self.FIRST)
        self.second = ctx.get_state(self.SECOND)

    def process_element1(self, value: Any, ctx: Any) -> None:
        t = ctx.timestamp_ms
        _add(self.first, t, value)
        for other, records in self.second.items():
            if t + self.lower_ms <= other <= t + self.upper_ms:
                for record in records:
                    self._emit(value, record, max(t, other), ctx)
        ctx.timer_service().register_event_time_timer(t + self.upper_ms)  # no second-input record joins it after

    def process_element2(self, value: Any, ctx: Any) -> None:
        t = ctx.timestamp_ms
        _add(self.second, t, value)
        for other, records in self.first.items():
            if other + self.lower_ms <= t <= other + self.upper_ms:
                for record in records:
                    self._emit(record, value, max(t, other), ctx)
        ctx.timer_service().register_event_time_timer(t - self.lower_ms)

    def on_timer(self, timestamp_ms: int, ctx: Any) -> None:
        for t in [t for t in self.first.keys() if t + self.upper_ms <= timestamp_ms]:
            self.first.remove(t)
        for t in [t for t in self.second.keys() if t - self.lower_ms <= timestamp_ms]:
            self.second.remove(t)

    def _emit(self, first: Any, second: Any, timestamp_ms: int, ctx: Any) -> None:
        result = type(self).join(first, second)
        if result is not None:
            own, ctx.timestamp_ms = ctx.timestamp_ms, timestamp_ms
            ctx.emit(ctx.key, result)
            ctx.timestamp_ms = own


def interval_join(lower_ms: int, upper_ms: int, join: Join | None = None) -> type[IntervalJoin]:
    """The function of a stage joining its two keyed inputs within ``[lower_ms, upper_ms]`` of
    each other (see the module): ``Stage(..., function=interval_join(-5_000, 5_000, join))``."""
    if lower_ms > upper_ms:
        raise ValueError(f"interval_join: lower_ms ({lower_ms}) must not be above upper_ms ({upper_ms})")
    attributes: dict[str, Any] = {"lower_ms": lower_ms, "upper_ms": upper_ms}
    if join is not None:
        attributes["join"] = staticmethod(join)
    return type("IntervalJoin", (IntervalJoin,), attributes)


class TableJoin(KeyedCoProcessFunction):
    """See the module; made by :func:`table_join`."""

    inner = False
    join: Join = staticmethod(_pair)
    EVENTS = MapStateDescriptor("table_join_events")  # event time -> the events of it, waiting
    VERSIONS = MapStateDescriptor("table_join_versions")  # time -> the row from then on (None: deleted)

    def open(self, ctx: Any) -> None:
        self.events = ctx.get_state(self.EVENTS)
        self.versions = ctx.get_state(self.VERSIONS)

    def process_element1(self, value: Any, ctx: Any) -> None:
        _add(self.events, ctx.timestamp_ms, value)
        ctx.timer_service().register_event_time_timer(ctx.timestamp_ms)

    def process_element2(self, value: Any, ctx: Any) -> None:
        self.versions.put(ctx.timestamp_ms, value["value"])  # table_decode's row
        ctx.timer_service().register_event_time_timer(ctx.timestamp_ms)  # to drop the versions it replaces

    def on_timer(self, timestamp_ms: int, ctx: Any) -> None:
        times = sorted(self.versions.keys())
        in_force = [t for t in times if t <= timestamp_ms]
        row = self.versions.get(in_force[-1]) if in_force else None
        for event in self.events.get(timestamp_ms) or []:
            if row is None and self.inner:
                continue
            result = type(self).join(event, row)
            if result is not None:
                ctx.emit(ctx.key, result)
        self.events.remove(timestamp_ms)
        for t in in_force[:-1]:  # replaced before the watermark: no event to come is that old
            self.versions.remove(t)


def table_join(join: Join | None = None, *, inner: bool = False) -> type[TableJoin]:
    """The function of a stage joining its first input (events) with its second (a table's rows,
    decoded by :func:`table_decode`), see the module."""
    attributes: dict[str, Any] = {"inner": inner}
    if join is not None:
        attributes["join"] = staticmethod(join)
    return type("TableJoin", (TableJoin,), attributes)


def table_decode(value_decode: Callable[[bytes | None, bytes | None], Any] = json_decode
                 ) -> Callable[[bytes | None, bytes | None], dict[str, Any]]:
    """A table input's decoder: ``{"key": the Kafka key as text, "value": the decoded value, or
    None for a record without one (a deletion, a compacted topic's tombstone)}``; key the input
    with ``key_by=lambda row: row["key"]``. A record without a key is refused (dead-lettered)."""

    def decode(key: bytes | None, value: bytes | None) -> dict[str, Any]:
        if key is None:
            raise ValueError("a table record has a key")
        return {"key": key.decode(), "value": None if value is None else value_decode(key, value)}

    return decode


def _add(state: Any, t: int, value: Any) -> None:
    waiting = state.get(t)
    state.put(t, [*waiting, value] if waiting else [value])
