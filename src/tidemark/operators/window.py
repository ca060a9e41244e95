"""The window operator (Flink's ``WindowOperator``): runs a keyed stage's :class:`~tidemark.windows.Windowed`.

Per record: the assigner gives its windows (sessions first merge with the key's windows in
flight, :mod:`tidemark.windows.merging_set`); a window already past its end plus the allowed
lateness is skipped; otherwise the record is added to the window's contents (the keyed state
``_window.contents`` in the window's namespace: a reduced value, an accumulator or the records)
and the trigger is asked what to do; a cleanup timer is set at the window's end plus the
allowed lateness. A record every window of which was skipped, and which is itself that late, is
*too late*: :meth:`WindowOperator.process_element` returns False and the runtime applies the
stage's ``late_records`` (dropped and counted, or written to ``late_output`` with its origin).

Per timer (``process_watermark`` / ``on_processing_time``): the timer's namespace is its window;
the trigger decides whether it fires or purges; at the cleanup time every piece of the window's
state goes (contents, trigger state, the function's per-window state, the window in the merging
set), so state does not grow with time. The operator's own state names start with ``_window.``
(``_window.contents``, ``_window.merging-set``, the built-in triggers' ``_window.trigger.*``); a
window function's state may not.

A firing reads the contents and emits ``(key, result)``, or calls the ``ProcessWindowFunction``;
what it emits carries the window's last millisecond as event time (a global window's: the time of
the record or timer that fired it). A firing that raises emits nothing; in a timer it goes to
``timer_failed`` (the stage's error policy, with the timer as the origin) once the window's
cleanup, if due, is done; in a record (a late or count firing) to the record's error policy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tidemark.api import Stage
from tidemark.operators.lifecycle import OutputRecord, StateInitializationContext
from tidemark.operators.time import StageTime, TimerServiceManager
from tidemark.operators.udf import EmittingContext, UdfOperator, raise_error
from tidemark.runtime.job.faults import FAULTS
from tidemark.state import KeyedStateBackend
from tidemark.state.timer_queue import MAX_TIMESTAMP
from tidemark.state.timers import TimeDomain, Timer
from tidemark.windows.functions import WINDOW_STATE_PREFIX
from tidemark.windows.merging_set import MERGING_WINDOW_SET, MergingWindowSet
from tidemark.windows.triggers import TriggerResult
from tidemark.windows.window import GlobalWindow, TimeWindow, Window, window_of

EVENT, PROCESSING = TimeDomain.EVENT_TIME, TimeDomain.PROCESSING_TIME
KNOWN_TIMERS = 1 << 16
"""How many registered timers a task's window operator remembers at most (see :class:`_Timers`)."""


class _Timers:
    """The task's timers as the window operator sets them: each record of a window registers the
    same timers again (its trigger's, its cleanup), which the timer service keeps once, yet pays
    for (the window encoded, the queue searched). So the timers registered since the last firing
    are remembered, by (domain, time, key, window), and registering one of them again is skipped;
    deleting one forgets it, and a second delete of the one just deleted is skipped too. A firing
    forgets them all, so a timer popped from the queue is never taken for one still there (the
    operator is the only one to change its task's timers, between firings). A cache: emptied when
    it holds :data:`KNOWN_TIMERS`."""

    __slots__ = ("service", "current_key", "known", "deleted")

    def __init__(self, service: TimerServiceManager, backend: KeyedStateBackend) -> None:
        self.service, self.current_key = service, backend.get_current_key
        self.known: set[tuple[Any, ...]] = set()
        self.deleted: tuple[Any, ...] | None = None

    def _entry(self, domain: TimeDomain, timestamp_ms: int, window: Any) -> tuple[Any, ...]:
        key = self.current_key()
        return domain, timestamp_ms, type(key), key, window  # keys 1 and True are two keys

    def register(self, domain: TimeDomain, timestamp_ms: int, window: Any) -> None:
        key, known = self.current_key(), self.known
        entry = (domain, timestamp_ms, type(key), key, window)  # as _entry, inline: once per record and window
        if entry in known:
            return
        self.service.register(domain, timestamp_ms, window)
        if len(known) >= KNOWN_TIMERS:
            known.clear()
        known.add(entry)
        if entry == self.deleted:
            self.deleted = None

    def delete(self, domain: TimeDomain, timestamp_ms: int, window: Any) -> None:
        entry = self._entry(domain, timestamp_ms, window)
        if entry == self.deleted:
            return
        self.known.discard(entry)
        self.service.delete(domain, timestamp_ms, window)
        self.deleted = entry

    def forget(self) -> None:
        self.known.clear()
        self.deleted = None


class _TriggerContext:
    """The :class:`~tidemark.windows.TriggerContext` of the current key and window."""

    __slots__ = ("backend", "timers", "time", "window", "merged")

    def __init__(self, backend: KeyedStateBackend, timers: _Timers) -> None:
        self.backend, self.timers, self.time = backend, timers, timers.service.time
        self.window: Window = TimeWindow(0, 0)
        self.merged: list[TimeWindow] = []  # in on_merge: the windows merged into self.window

    def register_event_time_timer(self, timestamp_ms: int) -> None:
        self.timers.register(EVENT, timestamp_ms, self.window)

    def register_processing_time_timer(self, timestamp_ms: int) -> None:
        self.timers.register(PROCESSING, timestamp_ms, self.window)

    def delete_event_time_timer(self, timestamp_ms: int) -> None:
        self.timers.delete(EVENT, timestamp_ms, self.window)

    def delete_processing_time_timer(self, timestamp_ms: int) -> None:
        self.timers.delete(PROCESSING, timestamp_ms, self.window)

    def current_watermark(self) -> int:
        return self.time.watermark

    def current_processing_time(self) -> int:
        return self.time.clock()

    def get_partitioned_state(self, descriptor: Any) -> Any:
        state = self.backend.get_state(descriptor)
        state.set_current_namespace(self.window)
        return state

    def merge_partitioned_state(self, descriptor: Any) -> None:
        self.backend.get_state(descriptor).merge_namespaces(self.window, self.merged)


class _WindowContext(EmittingContext):
    """The :class:`~tidemark.windows.WindowContext` a ``ProcessWindowFunction`` sees (also its
    ``open`` context: ``get_state`` is keyed state in the default namespace)."""

    __slots__ = ("backend", "stage", "out", "time", "window", "timestamp_ms", "merging")

    def __init__(self, backend: KeyedStateBackend, stage: Stage, out: list[OutputRecord], time: StageTime,
                 merging: bool) -> None:
        self.backend, self.stage, self.out, self.time, self.merging = backend, stage, out, time, merging
        self.window: Window = TimeWindow(0, 0)
        self.timestamp_ms = 0

    def window_state(self, descriptor: Any) -> Any:
        if self.merging:
            raise RuntimeError(f"stage {self.stage.name!r}: per-window state ({descriptor.name!r}) is not there in "
                               f"merging (session) windows; keep it in global_state")
        return self._state(descriptor, self.window)

    def global_state(self, descriptor: Any) -> Any:
        return self._state(descriptor, None)

    def _state(self, descriptor: Any, namespace: Any) -> Any:
        if descriptor.name.startswith(WINDOW_STATE_PREFIX):
            raise ValueError(f"stage {self.stage.name!r}: state names starting with {WINDOW_STATE_PREFIX!r} are the "
                             f"window operator's ({descriptor.name!r})")
        state = self.backend.get_state(descriptor)
        state.set_current_namespace(namespace)
        return state

    get_state = global_state

    def current_watermark(self) -> int:
        return self.time.watermark

    def current_processing_time(self) -> int:
        return self.time.clock()


class WindowOperator(UdfOperator):
    """Runs ``stage.function``, a :class:`Windowed` (see the module)."""

    judges_lateness = True

    def __init__(self, stage: Stage, timer_failed: Callable[[Timer, Exception], None] | None = None) -> None:
        windowed = stage.window
        if windowed is None:
            raise ValueError(f"stage {stage.name!r}: the window operator runs a Windowed function")
        self.stage, self.stage_name, self.windowed = stage, stage.name, windowed
        self.assigner = windowed.assigner
        self.trigger = windowed.effective_trigger
        self.lateness = windowed.allowed_lateness_ms
        self.event_time = self.assigner.is_event_time
        self.function = windowed.process() if windowed.process is not None else None
        self.timer_failed = timer_failed or raise_error
        self.timers: TimerServiceManager | None = None

    # ------------------------------------------------------------------ lifecycle

    def initialize_state(self, context: StateInitializationContext) -> None:
        backend, timers = context.keyed_state_backend, context.timer_service_manager
        if backend is None or timers is None:
            raise ValueError(f"stage {self.stage.name!r}: windows need a keyed stage")
        self.backend, self.timers, self.time = backend, timers, timers.time
        self.contents = backend.get_state(self.windowed.contents_descriptor())
        self.merging_state = backend.get_state(MERGING_WINDOW_SET) if self.assigner.merging else None
        self.window_timers = _Timers(timers, backend)
        self.trigger_ctx = _TriggerContext(backend, self.window_timers)
        self.window_ctx = _WindowContext(backend, self.stage, self.output, timers.time, self.assigner.merging)
        self.initialize_function(context)

    def open(self) -> None:
        if self.function is not None:
            self.function.open(self.window_ctx)

    # ------------------------------------------------------------------ records

    def process_element(self, value: Any, key: Any, timestamp_ms: int) -> bool:
        """Add the record to its windows; False when it was too late for all of them (see the module)."""
        at = timestamp_ms if self.event_time else self.time.clock()
        windows = self.assigner.assign_windows(value, at)
        watermark = self.time.watermark
        skipped = True
        if self.merging_state is not None:
            in_flight = MergingWindowSet(self.assigner, self.merging_state)
            merge = self._merger(key)
            for window in windows:
                actual = in_flight.add(window, merge)  # type: ignore[arg-type]
                if self._is_late(actual, watermark):
                    in_flight.retire(actual)
                    continue
                skipped = False
                self._add(key, value, timestamp_ms, actual, in_flight.state_window(actual))  # type: ignore[arg-type]
            in_flight.persist()
        else:
            for window in windows:
                if self._is_late(window, watermark):
                    continue
                skipped = False
                self._add(key, value, timestamp_ms, window, window)
        return not (skipped and self.event_time and timestamp_ms + self.lateness <= watermark)

    def _add(self, key: Any, value: Any, timestamp_ms: int, window: Window, state_window: Window) -> None:
        contents = self.contents
        contents.set_current_namespace(state_window)
        contents.add(value)
        ctx = self.trigger_ctx
        ctx.window = window
        result = self.trigger.on_element(value, timestamp_ms, window, ctx)
        if result is not TriggerResult.CONTINUE:
            self._act(result, key, window, state_window, timestamp_ms)
        self._register_cleanup_timer(window)

    def _merger(self, key: Any) -> Callable[[TimeWindow, list[TimeWindow], TimeWindow, list[TimeWindow]], None]:
        def merge(cover: TimeWindow, covered: list[TimeWindow], state_window: TimeWindow,
                  merged_state_windows: list[TimeWindow]) -> None:
            ctx = self.trigger_ctx
            ctx.window, ctx.merged = cover, covered
            self.trigger.on_merge(cover, ctx)
            for window in covered:
                ctx.window = window
                self.trigger.clear(window, ctx)
                self._delete_cleanup_timer(window)
            self.contents.merge_namespaces(state_window, merged_state_windows)
            ctx.window, ctx.merged = cover, []
            FAULTS.hit("during-session-merge")
        return merge

    # ------------------------------------------------------------------ time

    def process_watermark(self, watermark_ms: int) -> None:
        self._fire(EVENT, watermark_ms)

    def on_processing_time(self, time_ms: int) -> None:
        self._fire(PROCESSING, time_ms)

    def _fire(self, domain: TimeDomain, time_ms: int) -> None:
        timers = self.timers
        assert timers is not None
        if not timers.due(domain, time_ms):
            return
        forget = self.window_timers.forget
        try:
            for timer in timers.pop_due(domain, time_ms):
                forget()  # the timers popped so far are gone (and this one's handling may set them again)
                self._on_timer(timer)
        finally:
            forget()

    def _on_timer(self, timer: Timer) -> None:
        """The trigger's answer to the timer, then, at the window's cleanup time, the cleanup; a
        firing that raises emits nothing and goes to ``timer_failed``, after the cleanup (a failed
        window's state goes all the same)."""
        window = window_of(timer.namespace)
        in_flight = None
        state_window: Window = window
        if self.merging_state is not None:
            in_flight = MergingWindowSet(self.assigner, self.merging_state)
            merged_into = in_flight.state_window(window)  # type: ignore[arg-type]
            if merged_into is None:
                return  # a window merged into another meanwhile: its timers went with it
            state_window = merged_into
        ctx = self.trigger_ctx
        ctx.window = window
        failed: Exception | None = None
        emitted = len(self.output)
        try:
            if timer.domain is EVENT:
                result = self.trigger.on_event_time(timer.timestamp, window, ctx)
            else:
                result = self.trigger.on_processing_time(timer.timestamp, window, ctx)
            if result is not TriggerResult.CONTINUE:
                self._act(result, timer.key, window, state_window, timer.timestamp)
        except Exception as exc:
            del self.output[emitted:]
            failed = exc
        if (timer.domain is EVENT) == self.event_time and timer.timestamp == self._cleanup_time(window):
            self._clear_all(window, state_window, in_flight)
        if in_flight is not None:
            in_flight.persist()
        if failed is not None:
            self.timer_failed(timer, failed)

    # ------------------------------------------------------------------ firing and cleanup

    def _act(self, result: TriggerResult, key: Any, window: Window, state_window: Window, at: int) -> None:
        """Fire and/or purge ``window`` as the trigger said (``at``: the record's or timer's time)."""
        contents = self.contents
        contents.set_current_namespace(state_window)
        if result.fire:
            value = contents.get()
            if value is not None and value != []:
                self._emit(key, window, value, at)
                FAULTS.hit("during-window-firing")
        if result.purge:
            contents.clear()

    def _emit(self, key: Any, window: Window, value: Any, at: int) -> None:
        """What a firing emits carries the window's last millisecond as its event time; a global
        window's (which never ends), the time of the record or timer that fired it."""
        ctx = self.window_ctx
        ctx.window, ctx.timestamp_ms = window, at if isinstance(window, GlobalWindow) else window.max_timestamp
        if self.function is None:
            ctx.emit(key, value)
        else:
            self.function.process(key, value if self.windowed.keeps_records else [value], ctx)

    def _clear_all(self, window: Window, state_window: Window, in_flight: MergingWindowSet | None) -> None:
        self.contents.set_current_namespace(state_window)
        self.contents.clear()
        ctx = self.trigger_ctx
        ctx.window = window
        self.trigger.clear(window, ctx)
        if self.function is not None:
            self.window_ctx.window = window
            self.function.clear(self.window_ctx)
        if in_flight is not None:
            in_flight.retire(window)  # type: ignore[arg-type]

    def _cleanup_time(self, window: Window) -> int:
        """When the window's state goes: its end (event time: plus the allowed lateness)."""
        end = window.max_timestamp
        if not self.event_time:
            return end
        return end + self.lateness if end <= MAX_TIMESTAMP - self.lateness else MAX_TIMESTAMP

    def _is_late(self, window: Window, watermark: int) -> bool:
        return self.event_time and self._cleanup_time(window) <= watermark

    def _register_cleanup_timer(self, window: Window) -> None:
        at = self._cleanup_time(window)
        if at != MAX_TIMESTAMP:  # the global window is never cleaned up
            self.window_timers.register(EVENT if self.event_time else PROCESSING, at, window)

    def _delete_cleanup_timer(self, window: Window) -> None:
        at = self._cleanup_time(window)
        if at != MAX_TIMESTAMP:
            self.window_timers.delete(EVENT if self.event_time else PROCESSING, at, window)
