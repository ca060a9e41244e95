"""What a windowed stage computes (:class:`Windowed`) and the full-window function a job author
writes (:class:`ProcessWindowFunction`).

A keyed stage runs windows when its ``function`` is a :class:`Windowed` instead of a factory of a
``KeyedProcessFunction``::

    Stage("sessions", inputs=("access-log",), key_by=lambda r: r["ip"], output="sessions",
          function=Windowed(SessionWindows(gap_ms=30 * 60_000), aggregate=SessionStats(),
                            process=SessionRow, allowed_lateness_ms=10 * 60_000),
          event_time=EventTime(lambda r: r["ts"], max_out_of_orderness_ms=5_000))

Window functions, one of:

* ``reduce=f``: each window keeps one value, ``f(value, record)`` folded in as records come
  (Flink's ``ReduceFunction``; the records must be of the result's type);
* ``aggregate=a``: each window keeps one accumulator of an
  :class:`~tidemark.state.descriptors.AggregateFunction` (``create_accumulator``, ``add``,
  ``get_result``, ``merge``: ``merge`` is what merging sessions need);
* ``process=F``: a factory of a :class:`ProcessWindowFunction`; with ``reduce`` or ``aggregate``
  it gets the window's one result, alone all the window's records (kept in list state).

Without ``process``, a firing emits ``(key, result)``; with it, whatever ``process`` emits. Every
record a window emits has the window's last millisecond as its event time. The window's contents
are the key's state ``_window.contents`` (in the window's namespace), encoded by ``serializer``
(default: the default codec, which takes JSON-like values: records, accumulators of dicts,
lists, tuples, numbers, strings).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from tidemark.state.descriptors import (
    AggregateFunction,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
)
from tidemark.state.serializers import Serializer
from tidemark.windows.assigners import WindowAssigner
from tidemark.windows.triggers import Trigger
from tidemark.windows.window import Window

WINDOW_STATE_PREFIX = "_window."
"""The window operator's own keyed state names start with this; a window function's state may not."""
WINDOW_CONTENTS = WINDOW_STATE_PREFIX + "contents"


class WindowContext(Protocol):
    """What :meth:`ProcessWindowFunction.process` and ``clear`` get."""

    window: Window

    def emit(self, key: Any, value: Any) -> None:
        """Write a record to the stage's output (its event time: the window's last millisecond)."""

    def output(self, tag: Any, value: Any, key: Any = None) -> None:
        """Write a record to the side output ``tag`` (an :class:`~tidemark.api.OutputTag` or its
        name) names, as :meth:`tidemark.api.ProcessContext.output`."""

    def window_state(self, descriptor: Any) -> Any:
        """The key's state of ``descriptor`` in this window (not in merging windows: sessions)."""

    def global_state(self, descriptor: Any) -> Any:
        """The key's state of ``descriptor`` across windows (the default namespace)."""

    def current_watermark(self) -> int: ...

    def current_processing_time(self) -> int: ...


class ProcessWindowFunction(ABC):
    """A window's full function: called at each firing with the key, the window's records (or its
    one reduced or aggregated result) and a :class:`WindowContext`. A function may also be a
    ``CheckpointedFunction`` and a ``CheckpointListener`` (``tidemark.api``)."""

    def open(self, ctx: Any) -> None:  # noqa: B027 - optional hook
        """Once per task before the first record; ``ctx.get_state(descriptor)``: keyed state."""

    @abstractmethod
    def process(self, key: Any, elements: list[Any], ctx: WindowContext) -> None:
        """The window fired: emit its result(s) with ``ctx.emit``."""

    def clear(self, ctx: WindowContext) -> None:  # noqa: B027 - optional hook
        """The window is cleaned up (its end plus the allowed lateness passed): drop what it kept in
        ``ctx.window_state``."""

    def close(self) -> None:  # noqa: B027 - optional hook
        pass


@dataclass(frozen=True)
class Windowed:
    """A keyed stage's windows: the assigner, the window function and when it fires (see the module).

    ``allowed_lateness_ms``: how long after its end an event-time window still takes records (each
    late one fires it again, with the updated result); a record too late for every one of its
    windows goes where the stage's ``late_records`` says (dropped and counted, or written to its
    ``late_output`` with its origin). A window's state and timers are removed at its end plus the
    allowed lateness. ``trigger``: when windows fire (default: the assigner's, at the window's end).
    """

    assigner: WindowAssigner
    reduce: Callable[[Any, Any], Any] | None = None
    aggregate: AggregateFunction | None = None
    process: Callable[[], ProcessWindowFunction] | None = None
    trigger: Trigger | None = None
    allowed_lateness_ms: int = 0
    serializer: Serializer | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.assigner, WindowAssigner):
            raise ValueError(f"Windowed: assigner must be a window assigner (TumblingWindows, SlidingWindows, "
                             f"SessionWindows, GlobalWindows), got {self.assigner!r}")
        if self.reduce is not None and self.aggregate is not None:
            raise ValueError("Windowed: give reduce or aggregate, not both")
        if self.reduce is None and self.aggregate is None and self.process is None:
            raise ValueError("Windowed: give a window function: reduce, aggregate or process (or one of the first "
                             "two with process)")
        if not isinstance(self.allowed_lateness_ms, int) or self.allowed_lateness_ms < 0:
            raise ValueError(f"Windowed: allowed_lateness_ms must be 0 or more, got {self.allowed_lateness_ms!r}")
        if self.allowed_lateness_ms and not self.assigner.is_event_time:
            raise ValueError(f"Windowed: allowed_lateness_ms is for event-time windows ({self.assigner!r} has no "
                             f"late records)")
        trigger = self.effective_trigger  # GlobalWindows without a trigger raise here
        if self.assigner.merging and not trigger.can_merge():
            raise ValueError(f"Windowed: {trigger!r} cannot merge windows, which {self.assigner!r} needs")

    @property
    def needs_watermarks(self) -> bool:
        """True when the windows or their trigger go by event time (the job must make watermarks)."""
        return self.assigner.is_event_time or self.effective_trigger.uses_event_time

    @property
    def effective_trigger(self) -> Trigger:
        return self.trigger if self.trigger is not None else self.assigner.default_trigger()

    def contents_descriptor(self) -> StateDescriptor:
        """The state holding a window's contents: a reducing, aggregating or list state."""
        if self.reduce is not None:
            return ReducingStateDescriptor(WINDOW_CONTENTS, self.reduce, serializer=self.serializer)
        if self.aggregate is not None:
            return AggregatingStateDescriptor(WINDOW_CONTENTS, self.aggregate, serializer=self.serializer)
        return ListStateDescriptor(WINDOW_CONTENTS, serializer=self.serializer)

    @property
    def keeps_records(self) -> bool:
        """True when the window keeps every record (no reduce, no aggregate)."""
        return self.reduce is None and self.aggregate is None
