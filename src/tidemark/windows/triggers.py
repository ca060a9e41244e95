"""Triggers: when a window's function runs over the window's contents (Flink's ``Trigger``).

A trigger is asked on every record added to a window (``on_element``) and on every timer it
registered for that window (``on_event_time``, ``on_processing_time``); each answer is a
:class:`TriggerResult`: go on, fire (run the window function over the contents, which stay),
purge (drop the contents), or both. Its timers and its state (``ctx.get_partitioned_state``) are
the window's: scoped to the key and the window, checkpointed, restored and rescaled with every
other keyed state, and cleared with the window (``clear``). When session windows merge, a trigger
that can merge (``can_merge``) is told with ``on_merge``, where it merges its state
(``ctx.merge_partitioned_state``) and sets its timers for the merged window.

=====================================================  ========================================================
trigger                                                fires
=====================================================  ========================================================
``EventTimeTrigger()``                                 when the watermark passes the window's end (the default
                                                       of event-time windows); after that, for every late record
                                                       still within the allowed lateness
``ProcessingTimeTrigger()``                            when the wall clock passes the window's end (the default
                                                       of processing-time windows)
``CountTrigger(n)``                                    every ``n`` records of the window
``ContinuousEventTimeTrigger(interval_ms)``            every ``interval_ms`` of event time while the window is
                                                       open (early results), and at its end
``ContinuousProcessingTimeTrigger(interval_ms)``       every ``interval_ms`` of wall-clock time
``PurgingTrigger(trigger)``                            when ``trigger`` does, dropping the contents each time
``NeverTrigger()``                                     never (a window ended only by its cleanup)
=====================================================  ========================================================

Write your own by subclassing :class:`Trigger`; its hooks must be deterministic given the
records, the watermark and its state (they run again from the last checkpoint after a failure).
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from typing import Any, Protocol

from tidemark.state.descriptors import ReducingStateDescriptor
from tidemark.state.timer_queue import MAX_TIMESTAMP
from tidemark.windows.window import Window

TRIGGER_STATE_PREFIX = "_window.trigger."
"""The built-in triggers' state names start with this."""


class TriggerResult(enum.Enum):
    CONTINUE = (False, False)
    FIRE = (True, False)
    PURGE = (False, True)
    FIRE_AND_PURGE = (True, True)

    @property
    def fire(self) -> bool:
        return self.value[0]

    @property
    def purge(self) -> bool:
        return self.value[1]


class TriggerContext(Protocol):
    """What a trigger's hooks get: the window's timers and state, and the clocks."""

    def register_event_time_timer(self, timestamp_ms: int) -> None: ...

    def register_processing_time_timer(self, timestamp_ms: int) -> None: ...

    def delete_event_time_timer(self, timestamp_ms: int) -> None: ...

    def delete_processing_time_timer(self, timestamp_ms: int) -> None: ...

    def current_watermark(self) -> int: ...

    def current_processing_time(self) -> int: ...

    def get_partitioned_state(self, descriptor: Any) -> Any:
        """The key's state of ``descriptor`` in the current window."""

    def merge_partitioned_state(self, descriptor: Any) -> None:
        """In ``on_merge``: merge the state of ``descriptor`` (list, reducing or aggregating) of the
        windows being merged into the merged window's."""


class Trigger(ABC):
    """See the module."""

    uses_event_time = False
    """True when the trigger sets event-time timers (its job must make watermarks)."""

    @abstractmethod
    def on_element(self, value: Any, timestamp_ms: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        """A record was added to ``window``."""

    def on_event_time(self, time_ms: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        """An event-time timer of ``window`` fired."""
        return TriggerResult.CONTINUE

    def on_processing_time(self, time_ms: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        """A processing-time timer of ``window`` fired."""
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        """True when the trigger works with merging (session) windows."""
        return False

    def on_merge(self, window: Window, ctx: TriggerContext) -> None:
        """Windows were merged into ``window``: merge the trigger's state, set its timers."""
        raise NotImplementedError(f"{type(self).__name__} cannot merge windows")

    def clear(self, window: Window, ctx: TriggerContext) -> None:  # noqa: B027 - optional hook
        """``window`` is gone (cleaned up, or merged into another): drop its timers and state."""


class EventTimeTrigger(Trigger):
    """Fires once the watermark passes the window's end (see the module)."""

    uses_event_time = True

    def on_element(self, value: Any, timestamp_ms: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        if window.max_timestamp <= ctx.current_watermark():
            return TriggerResult.FIRE  # a late record within the allowed lateness: fire again at once
        if window.max_timestamp < MAX_TIMESTAMP:  # a global window never ends
            ctx.register_event_time_timer(window.max_timestamp)
        return TriggerResult.CONTINUE

    def on_event_time(self, time_ms: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        return TriggerResult.FIRE if time_ms == window.max_timestamp else TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Window, ctx: TriggerContext) -> None:
        if window.max_timestamp > ctx.current_watermark():
            ctx.register_event_time_timer(window.max_timestamp)

    def clear(self, window: Window, ctx: TriggerContext) -> None:
        ctx.delete_event_time_timer(window.max_timestamp)

    def __repr__(self) -> str:
        return "EventTimeTrigger()"


class ProcessingTimeTrigger(Trigger):
    """Fires once the wall clock passes the window's end."""

    def on_element(self, value: Any, timestamp_ms: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        ctx.register_processing_time_timer(window.max_timestamp)
        return TriggerResult.CONTINUE

    def on_processing_time(self, time_ms: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        return TriggerResult.FIRE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Window, ctx: TriggerContext) -> None:
        if window.max_timestamp > ctx.current_processing_time():
            ctx.register_processing_time_timer(window.max_timestamp)

    def clear(self, window: Window, ctx: TriggerContext) -> None:
        ctx.delete_processing_time_timer(window.max_timestamp)

    def __repr__(self) -> str:
        return "ProcessingTimeTrigger()"


def _add(a: int, b: int) -> int:
    return a + b


def _earliest(a: int, b: int) -> int:
    return min(a, b)


class CountTrigger(Trigger):
    """Fires every ``count`` records of a window (its count is window state)."""

    def __init__(self, count: int) -> None:
        if not isinstance(count, int) or count < 1:
            raise ValueError(f"CountTrigger needs a count of at least 1, got {count!r}")
        self.count = count
        self._counted = ReducingStateDescriptor(TRIGGER_STATE_PREFIX + "count", _add)

    def on_element(self, value: Any, timestamp_ms: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        counted = ctx.get_partitioned_state(self._counted)
        counted.add(1)
        if counted.get() >= self.count:
            counted.clear()
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Window, ctx: TriggerContext) -> None:
        ctx.merge_partitioned_state(self._counted)

    def clear(self, window: Window, ctx: TriggerContext) -> None:
        ctx.get_partitioned_state(self._counted).clear()

    def __repr__(self) -> str:
        return f"CountTrigger({self.count})"


class _Continuous(Trigger):
    """Fires every ``interval_ms`` in one time domain, the first time at the next multiple of the
    interval after the window's first record; the next firing time is window state."""

    event_time: bool

    def __init__(self, interval_ms: int) -> None:
        if not isinstance(interval_ms, int) or interval_ms < 1:
            raise ValueError(f"{type(self).__name__} needs an interval of at least 1 ms, got {interval_ms!r}")
        self.interval_ms = interval_ms
        self._next = ReducingStateDescriptor(f"{TRIGGER_STATE_PREFIX}{type(self).__name__}.next-fire", _earliest)

    def _register(self, ctx: TriggerContext, time_ms: int) -> None:
        if self.event_time:
            ctx.register_event_time_timer(time_ms)
        else:
            ctx.register_processing_time_timer(time_ms)

    def _now(self, ctx: TriggerContext) -> int:
        return ctx.current_watermark() if self.event_time else ctx.current_processing_time()

    def _schedule(self, window: Window, ctx: TriggerContext, after_ms: int) -> None:
        """The next firing: the first multiple of the interval after ``after_ms``, unless one is set."""
        state = ctx.get_partitioned_state(self._next)
        if state.get() is None:
            at = after_ms - after_ms % self.interval_ms + self.interval_ms
            state.add(at)
            self._register(ctx, at)

    def on_element(self, value: Any, timestamp_ms: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        if self.event_time:
            if window.max_timestamp <= ctx.current_watermark():
                return TriggerResult.FIRE
            if window.max_timestamp < MAX_TIMESTAMP:  # a global window never ends: no timer at its end
                ctx.register_event_time_timer(window.max_timestamp)
            self._schedule(window, ctx, timestamp_ms)
        else:
            self._schedule(window, ctx, ctx.current_processing_time())
        return TriggerResult.CONTINUE

    def _on_time(self, time_ms: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        if self.event_time and time_ms == window.max_timestamp:
            return TriggerResult.FIRE
        state = ctx.get_partitioned_state(self._next)
        if state.get() == time_ms:
            state.clear()
            self._schedule(window, ctx, time_ms)
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Window, ctx: TriggerContext) -> None:
        ctx.merge_partitioned_state(self._next)  # the earliest of the merged windows' next firings
        at = ctx.get_partitioned_state(self._next).get()
        if at is not None:
            self._register(ctx, at)
        if self.event_time and ctx.current_watermark() < window.max_timestamp < MAX_TIMESTAMP:
            ctx.register_event_time_timer(window.max_timestamp)

    def clear(self, window: Window, ctx: TriggerContext) -> None:
        state = ctx.get_partitioned_state(self._next)
        at = state.get()
        if at is not None:
            if self.event_time:
                ctx.delete_event_time_timer(at)
            else:
                ctx.delete_processing_time_timer(at)
            state.clear()
        if self.event_time and window.max_timestamp < MAX_TIMESTAMP:
            ctx.delete_event_time_timer(window.max_timestamp)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.interval_ms})"


class ContinuousEventTimeTrigger(_Continuous):
    """Fires every ``interval_ms`` of event time while the window is open (early results), and
    when the watermark passes its end."""

    event_time = True
    uses_event_time = True

    def on_event_time(self, time_ms: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        return self._on_time(time_ms, window, ctx)


class ContinuousProcessingTimeTrigger(_Continuous):
    """Fires every ``interval_ms`` of wall-clock time while the window has records."""

    event_time = False

    def on_processing_time(self, time_ms: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        return self._on_time(time_ms, window, ctx)


class PurgingTrigger(Trigger):
    """Wraps a trigger: each of its firings also purges the window's contents."""

    def __init__(self, trigger: Trigger) -> None:
        self.trigger = trigger
        self.uses_event_time = trigger.uses_event_time

    @staticmethod
    def _purging(result: TriggerResult) -> TriggerResult:
        return TriggerResult.FIRE_AND_PURGE if result.fire else result

    def on_element(self, value: Any, timestamp_ms: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        return self._purging(self.trigger.on_element(value, timestamp_ms, window, ctx))

    def on_event_time(self, time_ms: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        return self._purging(self.trigger.on_event_time(time_ms, window, ctx))

    def on_processing_time(self, time_ms: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        return self._purging(self.trigger.on_processing_time(time_ms, window, ctx))

    def can_merge(self) -> bool:
        return self.trigger.can_merge()

    def on_merge(self, window: Window, ctx: TriggerContext) -> None:
        self.trigger.on_merge(window, ctx)

    def clear(self, window: Window, ctx: TriggerContext) -> None:
        self.trigger.clear(window, ctx)

    def __repr__(self) -> str:
        return f"PurgingTrigger({self.trigger!r})"


class NeverTrigger(Trigger):
    """Never fires."""

    def on_element(self, value: Any, timestamp_ms: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Window, ctx: TriggerContext) -> None:
        pass

    def __repr__(self) -> str:
        return "NeverTrigger()"
