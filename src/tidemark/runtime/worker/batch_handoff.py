"""A stage processes one micro-batch while Spark fetches the next.

A stage's ``foreachBatch`` function runs in Spark's callback thread, and Spark plans and fetches
the next micro-batch only once it returns. :class:`BatchHandoff` lets it return as soon as its
batch is fetched (``frame.toArrow()``: Spark's executors read Kafka and convert the records to
Arrow) and handed over. One processing thread then processes the batches one at a time and in
order, while Spark fetches the next one. So the JVM's part of a batch and the worker's Python
part run side by side instead of taking turns (``docs/concepts/runtime.md``, "Throughput of a
worker").

**Bounded.** ``hand_over`` first waits until the batch before it is processed. So at most one
batch is processed while the next is fetched, memory holds two batches at most, and a slow stage
slows Spark's reading down (back pressure).

**Exactly-once is unchanged.** A worker's positions, state and output move only as the
processing thread processes a batch, and a checkpoint is taken between two batches in that
thread, so it holds exactly what was processed. A batch that was fetched but not processed when an
attempt ends is read again by the next attempt, from its checkpoint's positions: Spark's own
commit log lives only as long as one attempt and is never used to restore.

**Errors.** A batch that raised fails the next ``hand_over`` (so the query fails) and ``check``
(the attempt's loop, when no batch follows).

**Other work on the thread.** ``run_soon`` queues work that must run on the processing thread,
between batches and in order with them (the worker's ticks, :mod:`tidemark.runtime.worker.query`;
a fused worker's local channel, drained there: :mod:`tidemark.runtime.worker.local_channel`); it
never waits, and what it raised fails the next ``hand_over`` and ``check`` too.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any


class BatchHandoff:
    """Processes handed-over batches with ``process``, one at a time and in order, in its own thread."""

    def __init__(self, process: Callable[[Any], None], name: str = "batch",
                 initializer: Callable[[], None] | None = None) -> None:
        self._process = process
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name, initializer=initializer)
        self._pending: Future[None] | None = None
        self._failed: BaseException | None = None  # what work queued by run_soon raised first

    def hand_over(self, batch: Any) -> None:
        """Wait until the batch before is processed (raising what it raised), then start on ``batch``."""
        self.wait()
        self._pending = self._executor.submit(self._process, batch)

    def run_soon(self, work: Callable[[], None]) -> None:
        """Run ``work`` on the processing thread after what was handed over or queued before; no wait."""
        try:
            self._executor.submit(self._run_soon, work)
        except RuntimeError:  # closed: the attempt is over, and with it what the work was for
            pass

    def _run_soon(self, work: Callable[[], None]) -> None:
        if self._failed is not None:
            return
        try:
            work()
        except BaseException as exc:
            self._failed = exc

    def wait(self) -> None:
        """Until the batch handed over last is processed; raises what it (or queued work) raised."""
        pending = self._pending
        if pending is not None:
            pending.result()
        self._raise_failed()

    def check(self) -> None:
        """Raise what the batch handed over last raised, if it is processed and raised (or what
        queued work raised)."""
        pending = self._pending
        if pending is not None and pending.done():
            pending.result()
        self._raise_failed()

    def _raise_failed(self) -> None:
        if self._failed is not None:
            raise self._failed

    def close(self) -> None:
        """Let a batch being processed end, then stop the thread (raises nothing)."""
        self._executor.shutdown(wait=True)
