"""Idleness of a source stage's partitions through what a broker does: the consumer lag's record
of the broker's answers (tidemark.runtime.worker.consumer_lag.EndOffsets) and the partitions'
watermarks (tidemark.runtime.worker.watermarks.SourceWatermarks), driven on one scripted clock as a
worker drives them: records read in micro-batches, ticks between them, a lag report every 2 s
on the loop's thread (a report waiting for a stalled broker holds the ticks back), the
process's outage state. The producers write in order within each partition, a few hundred ms
apart across partitions: none of their records may ever be behind the watermark."""

from __future__ import annotations

from dataclasses import dataclass, field

from tidemark.api import EventTime
from tidemark.runtime.worker.consumer_lag import REPORT_EVERY_S, STALE_AFTER_S, EndOffsets
from tidemark.runtime.worker.watermarks import SourceWatermarks, Unread, WatermarkStatus

A, B = ("in", 0), ("in", 1)
IDLE_TIMEOUT_S = 3.0
EVENT_TIME = EventTime(max_out_of_orderness_ms=1_000, idle_timeout_ms=int(IDLE_TIMEOUT_S * 1000))


@dataclass
class SourceWorker:
    """The pure parts of a source worker and the broker's log they read; times in seconds."""

    now: float = 0.0
    log: dict[tuple[str, int], list[int]] = field(default_factory=lambda: {A: [], B: []})  # event times
    positions: dict[tuple[str, int], int] = field(default_factory=dict)
    outages: int = 0
    waiting: bool = False
    late: list[tuple[tuple[str, int], int, int]] = field(default_factory=list)  # partition, event time, watermark

    def __post_init__(self) -> None:
        self.ends = EndOffsets()
        self.watermarks = SourceWatermarks(EVENT_TIME, self.log)

    def write(self, partition: tuple[str, int], *event_times: int) -> None:
        """Records reach the broker."""
        self.log[partition].extend(event_times)

    def batch(self, *partitions: tuple[str, int]) -> None:
        """A micro-batch with everything the broker holds in ``partitions`` (the others' fetches
        return nothing), then the watermark moves as at the end of a batch."""
        for partition in partitions:
            for event_time in self.log[partition][self.positions.get(partition, 0):]:
                self.watermarks.observe(partition, event_time, self.now * 1000)
                if event_time <= self.watermarks.watermark:
                    self.late.append((partition, event_time, self.watermarks.watermark))
            self.positions[partition] = len(self.log[partition])
        self.update()

    def report(self, *, answered_after_s: float = 0.0, fails: bool = False) -> None:
        """A lag report asked now; it is answered (the ends as the broker holds them then) or
        fails ``answered_after_s`` later, and the loop's clock moves on by as much."""
        asked = self.now
        self.now += answered_after_s
        if fails:
            self.ends.failed()
        else:
            self.ends.answered({p: len(records) for p, records in self.log.items()}, asked, self.now, self.outages)

    def ticks(self, until: float, *, reports: bool = True) -> None:
        """The loop's ticks every 100 ms up to ``until``, with a lag report every REPORT_EVERY_S
        (when ``reports``: a report asked during a stall is scripted with :meth:`report`)."""
        last_report = self.now
        while self.now + 0.1 <= until + 1e-9:
            self.now = round(self.now + 0.1, 3)
            self.update()
            if reports and self.now - last_report >= REPORT_EVERY_S - 1e-9:
                self.report()
                last_report = self.now

    def outage(self, begins: bool) -> None:
        """The process's BrokerWait saw the broker go away (or come back)."""
        if begins and not self.waiting:
            self.outages += 1
        self.waiting = begins

    def unread(self) -> Unread | None:
        return self.ends.unread(self.positions, self.now, self.waiting, self.outages)

    def update(self) -> WatermarkStatus:
        return self.watermarks.update(self.now * 1000, self.unread())


def _minute(start: int, count: int, step: int = 240) -> list[int]:
    return [start + i * step for i in range(count)]


def test_a_stall_that_holds_the_lag_report_until_the_broker_resumes_makes_no_partition_idle() -> None:
    """SIGSTOP on the broker: the report that asks during the stall waits (no ticks meanwhile),
    times out, and the next one is answered only when the broker resumes, with the ends from
    before the producers' backlog reached it. The silence of the stall, unseen by any tick, is
    no idleness: partition B's backlog, reaching the broker a second after A's, is not late."""
    worker = SourceWorker()
    worker.write(A, *_minute(10_000, 20))
    worker.write(B, *_minute(10_120, 20))
    worker.report()
    worker.batch(A, B)
    worker.ticks(until=1.9)
    assert worker.update() == WatermarkStatus(10_000 + 19 * 240 - 1_001)  # A's, the slower

    # t=1.9: the broker stalls; the report asked now waits 10 s and fails, the probe saw the outage
    worker.report(answered_after_s=10.0, fails=True)
    worker.outage(begins=True)
    worker.ticks(until=13.9, reports=False)
    # t=13.9: the next report waits until the broker resumes at t=20.5, the probe sees it back
    worker.report(answered_after_s=6.6)
    worker.outage(begins=False)
    worker.ticks(until=20.7)

    worker.write(A, *_minute(14_800, 40))  # the producers' backlog: A's first
    worker.batch(A)
    worker.ticks(until=21.6)
    worker.write(B, *_minute(14_920, 40))  # B's a second later (its producer's retry)
    worker.batch(A, B)
    assert worker.late == []
    assert worker.update() == WatermarkStatus(14_800 + 39 * 240 - 1_001)


def test_a_partition_whose_fetches_return_nothing_is_not_idle_on_an_answer_older_than_its_silence() -> None:
    """B's records reach the broker right after a lag report, but its fetches return nothing
    while A's advance, and the next reports come late (the loop waits behind long batches):
    the answer from before B's records proves nothing about B."""
    worker = SourceWorker()
    worker.write(A, *_minute(10_000, 5))
    worker.write(B, *_minute(10_100, 5))
    worker.report()
    worker.batch(A, B)
    worker.write(B, *_minute(11_300, 20))  # at t=0.1, after the report
    for step in range(1, 8):  # A's batches, half a second apart, with no report (under STALE_AFTER_S)
        worker.now = step * 0.6
        worker.write(A, *_minute(10_000 + step * 1_200, 5))
        worker.batch(A)
    assert worker.now - 0.0 < STALE_AFTER_S and worker.unread() is not None
    assert worker.watermarks.watermark < 11_300
    worker.report()  # B's records are unread by this one: B is active
    worker.ticks(until=9.0)
    worker.batch(B)
    assert worker.late == []


def test_a_partition_is_idle_once_the_broker_answered_about_it_after_its_silence() -> None:
    """The rule does not keep idleness away: B, silent and caught up, is idle by the first
    report asked once its silence lasted the timeout, with the broker answering all along."""
    worker = SourceWorker()
    worker.write(A, 10_000)
    worker.write(B, 9_000)
    worker.report()
    worker.batch(A, B)
    for step in range(1, 30):
        worker.now = step * 0.2
        worker.write(A, 10_000 + step * 200)
        worker.batch(A)
        if step % 10 == 0:
            worker.report()
        if worker.update().watermark > 8_000:
            break
    assert worker.watermarks.watermark == 10_000 + step * 200 - 1_001
    assert IDLE_TIMEOUT_S <= worker.now <= IDLE_TIMEOUT_S + REPORT_EVERY_S  # B idle by the report at t=4


def test_an_outage_between_two_answers_starts_the_unbroken_answers_anew() -> None:
    ends = EndOffsets()
    ends.answered({A: 3}, asked=0.0, answered=0.25, outages=0)
    ends.answered({A: 3}, asked=2.0, answered=2.25, outages=0)
    assert ends.unread({A: 3}, now=2.5, waiting=False, outages=0) == Unread(frozenset(), 2_000, 250)
    assert ends.unread({A: 3}, now=2.5, waiting=True, outages=1) is None  # the probe sees an outage
    assert ends.unread({A: 3}, now=3.5, waiting=False, outages=1) is None  # over, but not answered since
    ends.answered({A: 5}, asked=4.0, answered=4.25, outages=1)
    assert ends.unread({A: 3}, now=4.5, waiting=False, outages=1) == Unread(frozenset({A}), 4_000, 4_250)
    ends.answered({A: 5}, asked=6.0, answered=8.5, outages=1)  # an answer that took longer than a report interval
    assert ends.unread({A: 5}, now=8.5, waiting=False, outages=1) == Unread(frozenset(), 6_000, 8_500)
    ends.answered({A: 5}, asked=14.0, answered=14.25, outages=1)  # the one before is over STALE_AFTER_S old
    assert ends.unread({A: 5}, now=14.5, waiting=False, outages=1) == Unread(frozenset(), 14_000, 14_250)
    assert ends.unread({A: 5}, now=14.5 + STALE_AFTER_S, waiting=False, outages=1) is None
    ends.failed()
    assert ends.unread({A: 5}, now=14.5, waiting=False, outages=1) is None
