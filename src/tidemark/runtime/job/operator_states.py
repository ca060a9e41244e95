"""The runtime's own operator states: what a stage worker keeps of itself in each task's operator
state, next to the user function's. The worker writes them at each checkpoint and reads them
back on restore; the supervisor names them when a checkpoint holds state no stage claims
(:mod:`tidemark.runtime.supervisor.state_claims`). All are union list states (every task of the
restored stage sees every item) whose names start with :data:`RESERVED_PREFIX`, which a user
function's operator state may not use.
"""

from __future__ import annotations

from tidemark.state import ListStateDescriptor

RESERVED_PREFIX = "tidemark_"
"""Operator state names of the runtime's own; a function's may not start with it."""

SINK_STATE = ListStateDescriptor("tidemark_sink_pending")
"""The write-ahead buffers of the task's output (see runtime.worker.outputs)."""
CUT_STATE = ListStateDescriptor("tidemark_channel_cut")
"""Where the stage's channel input was cut (see runtime.worker.alignment)."""
WATERMARK_STATE = ListStateDescriptor("tidemark_watermarks")
"""The worker's watermarks at the checkpoint (see runtime.worker.watermarks)."""
