"""A stage worker's side of live state queries over a real broker, for the service tests that play
the job themselves: the worker's own :class:`~tidemark.runtime.job.control.ControlPlane` (the
state-queries topic from its end, answers to the state-answers topic) and the runtime's tasks of
one stage (a test harness's, with real state backends), answered by
:func:`tidemark.runtime.worker.live_state.answer` as ``StageRunner.handle_control`` does, in a
thread polling every 50 ms (a worker polls between micro-batches and on its ticks).

Lifecycle: ``StateQueryWorker(...).start()`` -> ``stop()``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from tidemark.kafka.topics import TopicNames
from tidemark.protocol.messages import StateQuery
from tidemark.runtime.job.control import ControlPlane
from tidemark.runtime.worker.live_state import QueriedTask, answer
from tidemark.types import Epoch, JobId


class StateQueryWorker:
    def __init__(self, bootstrap: str, topics: TopicNames, job: JobId, stage: str, tasks: Sequence[QueriedTask],
                 lock: Any = None, epoch: Epoch = Epoch(1)) -> None:
        self.control = ControlPlane({"bootstrap.servers": bootstrap}, topics, job)
        self.stage, self.tasks, self.epoch = stage, list(tasks), epoch
        self.lock = lock or threading.Lock()
        self.answered = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="state-query-worker", daemon=True)

    def start(self) -> StateQueryWorker:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            with self.lock:
                replies = [reply for note in self.control.poll() if isinstance(note, StateQuery)
                           if (reply := answer(note, self.stage, self.tasks, self.epoch)) is not None]
            if replies:
                self.control.answer(replies)
                self.answered += len(replies)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.control.close()
