"""Windows on keyed stages: assigners, triggers, window functions, allowed lateness.

A keyed stage whose ``function`` is a :class:`Windowed` runs the window operator
(:mod:`tidemark.operators.window`) instead of a ``KeyedProcessFunction``. See
``docs/concepts/windows.md`` and the worked examples in ``docs/guide/writing-a-job.md``.
"""

from tidemark.windows.assigners import GlobalWindows, SessionWindows, SlidingWindows, TumblingWindows, WindowAssigner
from tidemark.windows.functions import ProcessWindowFunction, WindowContext, Windowed
from tidemark.windows.triggers import (
    ContinuousEventTimeTrigger,
    ContinuousProcessingTimeTrigger,
    CountTrigger,
    EventTimeTrigger,
    NeverTrigger,
    ProcessingTimeTrigger,
    PurgingTrigger,
    Trigger,
    TriggerContext,
    TriggerResult,
)
from tidemark.windows.window import GlobalWindow, TimeWindow, Window

__all__ = [
    "ContinuousEventTimeTrigger",
    "ContinuousProcessingTimeTrigger",
    "CountTrigger",
    "EventTimeTrigger",
    "GlobalWindow",
    "GlobalWindows",
    "NeverTrigger",
    "ProcessWindowFunction",
    "ProcessingTimeTrigger",
    "PurgingTrigger",
    "SessionWindows",
    "SlidingWindows",
    "TimeWindow",
    "Trigger",
    "TriggerContext",
    "TriggerResult",
    "TumblingWindows",
    "Window",
    "WindowAssigner",
    "WindowContext",
    "Windowed",
]
