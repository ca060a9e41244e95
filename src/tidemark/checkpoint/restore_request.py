"""Inputs to the coordinator that do not come from a topic record."""

from __future__ import annotations

from dataclasses import dataclass

from tidemark.protocol.messages import CheckpointMetadata


@dataclass(frozen=True, slots=True)
class RestoreRequest:
    """Operator (CLI/HTTP) or failover -> coordinator: restart the job from ``metadata``.

    ``metadata`` is the completed checkpoint or savepoint read from ``metadata_path``;
    ``parallelism`` is the new parallelism of every operator. The coordinator answers with a
    ``RestoreCommand``, which is the record that makes the restore part of the log.

    ``newest_seen`` (a failover's or a resume's guard): the newest checkpoint or savepoint id the
    requester saw retained when it chose ``metadata``. If one newer than that completed since,
    the running attempt's sinks may have committed its output, which restoring ``metadata``
    would commit again: the coordinator refuses with :class:`NewerCheckpointCompleted`, and the
    requester chooses again. None: no guard (an operator restoring an older state on purpose).
    """

    restore_id: str
    metadata: CheckpointMetadata
    metadata_path: str
    parallelism: int
    requested_at: int
    newest_seen: int | None = None

    def __post_init__(self) -> None:
        if not self.restore_id:
            raise ValueError("restore_id must not be empty")
        if not 0 < self.parallelism <= self.metadata.max_parallelism:
            raise ValueError(
                f"parallelism must be in 1..{self.metadata.max_parallelism}, got {self.parallelism}"
            )


class NewerCheckpointCompleted(Exception):
    """A restore guarded by ``newest_seen`` came after a newer checkpoint completed."""

    def __init__(self, job: str, completed: int, newest_seen: int) -> None:
        super().__init__(f"checkpoint {completed} of job {job} completed after the restore source was chosen "
                         f"(the newest seen then: {newest_seen}); choose again")
