"""Names and shapes of a deployment's topics (one set per ``topic_prefix``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True, slots=True)
class TopicSpec:
    name: str
    partitions: int = 1
    config: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TopicNames:
    """Every topic of one deployment, derived from its prefix."""

    prefix: str = "tidemark"

    @property
    def control(self) -> str:
        return f"{self.prefix}.control"

    @property
    def acks(self) -> str:
        return f"{self.prefix}.acks"

    @property
    def checkpoint_events(self) -> str:
        return f"{self.prefix}.checkpoint-events"

    @property
    def materializations(self) -> str:
        return f"{self.prefix}.materializations"

    @property
    def dead_letters(self) -> str:
        return f"{self.prefix}.dead-letters"

    @property
    def sink_commits(self) -> str:
        """The exactly-once sinks' commit markers (:mod:`tidemark.kafka.commit_markers`)."""
        return f"{self.prefix}.sink-commits"

    @property
    def worker_hosts(self) -> str:
        """Supervisors' assignments to worker hosts and the hosts' reports (:mod:`tidemark.runtime.placement.host_channel`)."""
        return f"{self.prefix}.worker-hosts"

    @property
    def heartbeats(self) -> str:
        """Supervisors' evidence of life (:mod:`tidemark.runtime.supervisor.heartbeat`): kept minutes, not
        forever, so the control topic that services replay at every start does not grow with them."""
        return f"{self.prefix}.heartbeats"

    @property
    def state_queries(self) -> str:
        """The coordinator's live state queries to the jobs' stage workers (:mod:`tidemark.runtime.worker.live_state`):
        kept minutes, read by the workers from their end only."""
        return f"{self.prefix}.state-queries"

    @property
    def state_answers(self) -> str:
        """The stage workers' answers to live state queries, read by the coordinator."""
        return f"{self.prefix}.state-answers"

    def changelog(self, job_id: str, operator_id: str) -> str:
        return f"{self.prefix}.changelog.{_UNSAFE.sub('_', job_id)}.{_UNSAFE.sub('_', operator_id)}"

    def exchange(self, job_id: str, stage: str) -> str:
        """The keyed exchange of a source stage spread over several workers (runtime.job.physical_plan)."""
        return f"{self.prefix}.exchange.{_UNSAFE.sub('_', job_id)}.{_UNSAFE.sub('_', stage)}"

    def control_plane(self) -> list[TopicSpec]:
        """The service topics. Control and acks keep one partition: their order is the protocol."""
        keep = {"retention.ms": "-1", "cleanup.policy": "delete"}
        return [
            TopicSpec(self.control, 1, keep),
            TopicSpec(self.acks, 1, keep),
            TopicSpec(self.checkpoint_events, 1, keep),
            TopicSpec(self.materializations, 1, keep),
            TopicSpec(self.dead_letters, 1, {"retention.ms": str(14 * 24 * 3600 * 1000)}),
            TopicSpec(self.worker_hosts, 1, {"retention.ms": str(24 * 3600 * 1000)}),  # heartbeats: a day
            TopicSpec(self.heartbeats, 1, {"retention.ms": str(10 * 60 * 1000), "segment.ms": str(60 * 1000)}),
            TopicSpec(self.state_queries, 1, {"retention.ms": str(10 * 60 * 1000), "segment.ms": str(60 * 1000)}),
            TopicSpec(self.state_answers, 1, {"retention.ms": str(10 * 60 * 1000), "segment.ms": str(60 * 1000)}),
        ]
