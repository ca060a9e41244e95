"""Evidence that a job's supervisor is alive: its heartbeats, and how long the coordinator heard none.

A supervisor writes a :class:`~tidemark.protocol.messages.SupervisorHeartbeat` about every second
on the control topic for as long as it runs. Silence only means something while the coordinator
itself receives what is written there: after its own restart (it replays first) or during a
broker outage it hears nobody, and no job may flip for that. So the edge tells
:class:`DeliveryWatch` every time its reader is confirmed to have read everything the topics
held a moment before (a fresh high-watermark answer from the broker), and silence is counted
only from the start of the current unbroken run of such confirmations.

Pure: the coordinator's clock is passed in (``now_ms``); heartbeats are never replayed (a
restarted coordinator has heard nobody yet, and counts silence from when it listens).

Lifecycle: one :class:`DeliveryWatch` per coordinator edge (``confirmed(now_ms)`` per
confirmation, ``listening_since(now_ms)`` per tick); one :class:`SupervisorLiveness` per job
(``heard(heartbeat, now_ms)`` per live heartbeat, ``silence(now_ms, listening_since)`` per tick).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from tidemark.protocol.messages import SupervisorHeartbeat

SILENCE_MS = 5_000
"""A supervisor unheard this long (while the coordinator listens) is taken for gone."""
DELIVERY_GAP_MS = 3_000
"""Confirmations further apart than this break the coordinator's listening (an outage)."""


def _utc(epoch_ms: int) -> str:
    moment = datetime.fromtimestamp(epoch_ms / 1000, tz=timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


@dataclass
class DeliveryWatch:
    """Since when the coordinator has been receiving its topics without a gap."""

    gap_ms: int = DELIVERY_GAP_MS
    confirmed_at: int | None = None
    since: int | None = None

    def confirmed(self, now_ms: int) -> None:
        """The reader read everything the broker said the topics held a moment ago."""
        if self.confirmed_at is None or now_ms - self.confirmed_at > self.gap_ms:
            self.since = now_ms
        self.confirmed_at = now_ms

    def listening_since(self, now_ms: int) -> int | None:
        """Start of the unbroken run of confirmations reaching ``now_ms``; None outside one."""
        if self.confirmed_at is None or now_ms - self.confirmed_at > self.gap_ms:
            return None
        return self.since


@dataclass(frozen=True, slots=True)
class Silence:
    """A supervisor heard from by no heartbeat for ``silent_ms`` of listening."""

    silent_ms: int
    last_sent_at: int | None  # the newest heartbeat's own time, None: none heard since listening

    @property
    def reason(self) -> str:
        last = (f"last heartbeat at {_utc(self.last_sent_at)}" if self.last_sent_at is not None
                else "no heartbeat since the coordinator started listening")
        return f"supervisor silent for {self.silent_ms // 1000} s ({last})"


class SupervisorLiveness:
    """The heartbeats of one job's supervisor(s), as this coordinator heard them."""

    __slots__ = ("silence_ms", "_heard_at", "_last_sent_at")

    def __init__(self, silence_ms: int = SILENCE_MS) -> None:
        self.silence_ms = silence_ms
        self._heard_at: int | None = None
        self._last_sent_at: int | None = None

    @property
    def ever_heard(self) -> bool:
        return self._heard_at is not None

    def heard(self, heartbeat: SupervisorHeartbeat, now_ms: int) -> None:
        self._heard_at = now_ms
        self._last_sent_at = heartbeat.sent_at

    def silence(self, now_ms: int, listening_since: int | None) -> Silence | None:
        """The silence at ``now_ms`` when longer than ``silence_ms`` of listening, else None
        (also whenever the coordinator is not listening)."""
        if listening_since is None:
            return None
        start = listening_since if self._heard_at is None else max(listening_since, self._heard_at)
        silent = now_ms - start
        return Silence(silent, self._last_sent_at) if silent > self.silence_ms else None
