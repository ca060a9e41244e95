"""Testing helpers for Tidemark jobs: :class:`KeyedProcessFunctionHarness` runs one stage's
function with real keyed state, without Kafka, Spark or services."""

from tidemark.testing.harness import Emitted, HarnessSnapshot, KeyedProcessFunctionHarness

__all__ = ["Emitted", "HarnessSnapshot", "KeyedProcessFunctionHarness"]
