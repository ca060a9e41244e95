"""Which failures of a job a restart will not fix, and their one-line reason.

A stage worker that fails for such a reason exits with ``EXIT_REFUSED`` (3) after writing
the reason to its attempt's ``.failed`` file (:func:`failed_file`); the supervisor then stops the
job with that line (exit 3, state ``FAILED``) instead of restoring attempt after attempt. Every
other failure is retryable and goes through the restart policy (``--max-restarts``).

Not retryable: a missing input topic, a job reference or job arguments that do not load, invalid
configuration (also a worker's exit 78), restored state the job's new code cannot read (a schema
change that is not compatible, ``StateMigrationError``). A changelog topic the changelog service has not created
yet is retried. Errors raised inside Spark arrive as Java and
Py4J exceptions whose text holds the Python error somewhere between stack frames;
:func:`not_retryable_reason` finds the root message there too.
"""

from __future__ import annotations

import re
from pathlib import Path

from tidemark.config.settings import ConfigurationError
from tidemark.api import JobSpecError
from tidemark.kafka.metadata import TopicNotFoundError
from tidemark.runtime.job.attempt import stage_file
from tidemark.state.schema_evolution import StateMigrationError


_MISSING_TOPICS = re.compile(r"topic\(s\) not found: \[([^\]]*)\]")
# a Python exception named inside a Spark/Py4J error's text: "TopicNotFoundError: <message>"
_NAMED = re.compile(r"\b(TopicNotFoundError|JobSpecError|SparkStepError|ConfigurationError|MissingInputTopic|StateMigrationError):"
                    r"\s*([^\n]+)")


class MissingInputTopic(LookupError):
    """The job's input topic does not exist; the job creates only its channel and output topics."""


def missing_topics_reason(topics: list[str]) -> str:
    names = ", ".join(f"'{t}'" for t in topics)
    noun = "topic" if len(topics) == 1 else "topics"
    verb = "does" if len(topics) == 1 else "do"
    return (f"input {noun} {names} {verb} not exist (create it; a job creates only its channel and output "
            f"topics)")


def _topics_of(text: str) -> list[str] | None:
    found = _MISSING_TOPICS.search(text)
    if found is None:
        return None
    return [t.strip().strip("'\"") for t in found.group(1).split(",") if t.strip()]


def not_retryable_reason(error: BaseException) -> str | None:
    """The one-line reason when ``error`` is one a restart will not fix, else None."""
    if isinstance(error, (MissingInputTopic, JobSpecError, ConfigurationError, StateMigrationError)):
        return str(error).splitlines()[0] if str(error) else type(error).__name__
    if isinstance(error, TopicNotFoundError):  # an input topic; not a changelog topic still being created
        topics = _topics_of(str(error))
        return missing_topics_reason(topics) if topics else None
    named = _NAMED.search(str(error))
    if named is None:
        return None
    if named.group(1) == "TopicNotFoundError":
        topics = _topics_of(named.group(2))
        return missing_topics_reason(topics) if topics else None
    return named.group(2).strip()


def failed_file(run_dir: Path, stage: str, epoch: int) -> Path:
    """Where a stage worker of attempt ``epoch`` leaves its not-retryable reason."""
    return stage_file(run_dir, stage, epoch, "failed")
