"""The windows of one key that merge (sessions), and which window holds each one's state (Flink's
``MergingWindowSet``).

When windows merge, their state is merged into the state of one of them rather than moved to a
new namespace: the set maps each window in flight to its *state window*, the namespace holding
its contents and trigger state. A merged window keeps the state window of one of the windows it
covers; the others' state is merged into it (``merge_namespaces``) by the caller's callback, which
also tells the trigger and moves the cleanup timers. The set is keyed state itself (the value
state ``_window.merging-set`` in the default namespace: a list of ``(start, end, state start,
state end)``, one read per record or timer of the key), written back only when it changed.
"""

from __future__ import annotations

from collections.abc import Callable

from tidemark.state import ValueState, ValueStateDescriptor
from tidemark.windows.assigners import WindowAssigner
from tidemark.windows.functions import WINDOW_STATE_PREFIX
from tidemark.windows.window import TimeWindow

MERGING_WINDOW_SET = ValueStateDescriptor(WINDOW_STATE_PREFIX + "merging-set")

MergeFunction = Callable[[TimeWindow, list[TimeWindow], TimeWindow, list[TimeWindow]], None]
"""``(merged window, windows it covers, its state window, the state windows to merge into it)``."""


class MergingWindowSet:
    """The current key's windows in flight; see the module."""

    def __init__(self, assigner: WindowAssigner, state: ValueState) -> None:
        self._assigner = assigner
        self._state = state
        self.mapping: dict[TimeWindow, TimeWindow] = {
            TimeWindow(start, end): TimeWindow(state_start, state_end)
            for start, end, state_start, state_end in state.value() or ()}
        self._stored = dict(self.mapping)

    def state_window(self, window: TimeWindow) -> TimeWindow | None:
        """Where ``window``'s state is; None when the window is not in flight (merged away, or gone)."""
        return self.mapping.get(window)

    def retire(self, window: TimeWindow) -> None:
        """``window`` is gone (cleaned up, or too late to keep)."""
        if self.mapping.pop(window, None) is None:
            raise KeyError(f"{window!r} is not a window in flight")

    def add(self, new: TimeWindow, merge: MergeFunction) -> TimeWindow:
        """Add ``new`` and merge what now touches; returns the window ``new`` ended up in (itself,
        or the merged window covering it). ``merge`` is called for every merge of windows already
        in flight (``new`` itself has no state yet, so it is not among the covered windows)."""
        groups: list[tuple[TimeWindow, list[TimeWindow]]] = []
        self._assigner.merge_windows([*self.mapping, new], lambda cover, covered: groups.append((cover, covered)))
        result, new_merged = new, False
        for cover, covered in groups:
            if new in covered:
                covered = [w for w in covered if w != new]
                new_merged, result = True, cover
            if not covered:
                continue
            state_window = self.mapping[covered[0]]
            merged_state_windows = [self.mapping.pop(w) for w in covered]
            merged_state_windows.remove(state_window)
            self.mapping[cover] = state_window
            if covered != [cover]:
                merge(cover, covered, state_window, merged_state_windows)
        if not new_merged:
            self.mapping[new] = new
        return result

    def persist(self) -> None:
        """Write the set into its keyed state if it changed since it was read (none left: cleared)."""
        mapping = self.mapping
        if mapping == self._stored:
            return
        self._state.update([(w.start, w.end, s.start, s.end) for w, s in mapping.items()] or None)
        self._stored = dict(mapping)
