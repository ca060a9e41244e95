"""The worker runtime: jobs of keyed stages on PySpark, checkpointed through Kafka.

``api`` (what users write), ``routing`` (key groups -> tasks), ``task`` (one task's state and
function), ``alignment`` (barriers on channels), ``outputs`` (channel, two-phase-commit and
at-least-once sinks), ``control`` (triggers in, acks out), ``worker`` (one stage attempt),
``query`` (the Spark query around it), ``supervisor`` (attempts, failover), ``faults`` (kill
points for failure tests), ``metrics``.
"""

from tidemark.runtime.api import JobSpec, KeyedProcessFunction, Stage, StateBackendKind, load_job

__all__ = ["JobSpec", "KeyedProcessFunction", "Stage", "StateBackendKind", "load_job"]
