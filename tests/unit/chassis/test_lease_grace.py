"""A service replays its logs during the singleton lease's grace period but acts only after it
(tidemark.chassis.app, tidemark.chassis.singleton): a replayed record is folded at once; a live
record, ``on_caught_up`` and so readiness wait until the grace has passed."""

from __future__ import annotations

import asyncio
import time

import pytest

from tidemark.chassis.app import ServiceApp
from tidemark.chassis.dead_letter_publisher import RawRecord
from tidemark.chassis.replay import EventLogReader, LogRecord
from tidemark.config.settings import TidemarkSettings
from tidemark.protocol import codec
from tidemark.protocol.messages import TaskAck, TaskSnapshot, TaskTimings
from tidemark.types import CheckpointId, JobId, KeyGroup, OperatorId, TaskId

pytestmark = pytest.mark.unit
GRACE_S = 0.4


def _record(checkpoint_id: int, *, replayed: bool) -> LogRecord:
    ack = TaskAck(job_id=JobId("j"), checkpoint_id=CheckpointId(checkpoint_id),
                  task=TaskSnapshot(TaskId("op#0"), OperatorId("op"), 0, KeyGroup(0), KeyGroup(127)),
                  timings=TaskTimings(), acked_at=1)
    raw = RawRecord(topic="acks", partition=0, offset=checkpoint_id, timestamp=None, key=None,
                    value=codec.encode(ack), headers={})
    return LogRecord(raw, replayed)


class ScriptedLog(EventLogReader):
    """An event log that returns the given batches, one per poll, then nothing; caught up once the
    replayed batches are returned."""

    def __init__(self, batches: list[list[LogRecord]], replayed_batches: int) -> None:
        super().__init__({"bootstrap.servers": "127.0.0.1:1"}, ["acks"])
        self.batches = batches
        self.replayed_batches = replayed_batches
        self.polled = 0

    def open(self) -> None:
        pass

    @property
    def caught_up(self) -> bool:
        return self.polled >= self.replayed_batches

    def poll(self, max_records: int = 500, timeout_s: float = 0.2) -> list[LogRecord]:
        if self.polled < len(self.batches):
            self.polled += 1
            return self.batches[self.polled - 1]
        time.sleep(0.01)
        return []

    def close(self) -> None:
        pass


def test_replayed_records_are_folded_in_the_grace_live_ones_and_caught_up_after_it(tmp_path) -> None:
    app = ServiceApp("grace-test", TidemarkSettings(bootstrap_servers="127.0.0.1:1", home=tmp_path, http_port=1))
    app._logs.append(ScriptedLog([], 0))  # registered, as follow_log does
    reader = ScriptedLog([[_record(1, replayed=True)], [_record(2, replayed=False)]], replayed_batches=1)
    seen: dict[str, float] = {}

    async def handler(message: TaskAck, raw: RawRecord, replayed: bool) -> None:
        seen[f"checkpoint {message.checkpoint_id}"] = time.monotonic()

    async def on_caught_up() -> None:
        seen["caught up"] = time.monotonic()

    async def scenario() -> None:
        claimed = time.monotonic()
        app._acting_from = claimed + GRACE_S  # what run() takes from the lease's claim
        follow = asyncio.ensure_future(app._follow(reader, handler, on_caught_up, 0))
        try:
            while "checkpoint 2" not in seen and time.monotonic() < claimed + 10:
                assert app.ready() == ("caught up" in seen)
                await asyncio.sleep(0.01)
        finally:
            follow.cancel()
        assert seen["checkpoint 1"] < claimed + GRACE_S  # replay does not wait for the grace
        assert seen["caught up"] >= claimed + GRACE_S
        assert seen["checkpoint 2"] >= seen["caught up"]
        assert app.ready()

    asyncio.run(scenario())


def test_an_instance_that_has_not_claimed_its_lease_may_not_act(tmp_path) -> None:
    app = ServiceApp("grace-test", TidemarkSettings(bootstrap_servers="127.0.0.1:1", home=tmp_path, http_port=1))
    assert not app.may_act()
    app._acting_from = time.monotonic() + 60
    assert not app.may_act()
    app._acting_from = time.monotonic()
    assert app.may_act()
