"""Messages whose wire bytes are pinned in ``golden/<case>.bin``: every sample of every message
type, plus edge values on the hot paths (empty, unicode, extreme ints, nulls, nested maps).

The ``.bin`` files were written once by the avro-package encoder the codec used before its
compiled functions (``python tests/unit/protocol/golden_cases.py`` on that code); they are only added to,
with one exception: they pin what the *newest* schema writes, so a new version of a record makes
its cases' files out of date. Then, and only for that record, delete ``golden/<Name>-*.bin`` and
run this script again: the older version's bytes stay pinned in ``tests/golden/<Name>/v<N>.json``,
and ``test_protocol_wire_bytes.py`` checks the new files against the avro package's stock writer
and fastavro as well as the codec (``JobRegistration`` v4 was added this way).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from protocol_samples import ASSIGNMENTS, FILES, HANDLE, JOB, RANGE, SAMPLES, SNAPSHOT, T0

from tidemark.protocol import messages as m
from tidemark.protocol.dead_letters import DeadLetter
from tidemark.types import (
    CheckpointId,
    CheckpointingMode,
    CheckpointType,
    Epoch,
    JobId,
    KeyGroup,
    MaterializationId,
    OperatorId,
    SequenceNumber,
    TaskId,
)

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
INT_MAX, INT_MIN = 2**31 - 1, -(2**31)
LONG_MAX, LONG_MIN = 2**63 - 1, -(2**63)
UNICODE = "Zähler·計数·🚀·\u0000·\u202e"

EDGES: dict[str, Any] = {
    "StateChange-empty": m.StateChange(JobId(""), TaskId(""), KeyGroup(0), "", m.StateChangeOp.CLEAR, b""),
    "StateChange-unicode": m.StateChange(JobId(UNICODE), TaskId("op-ü#0"), KeyGroup(5), UNICODE, m.StateChangeOp.PUT,
                                         UNICODE.encode(), UNICODE.encode(), b"\x00", UNICODE.encode("utf-16"), T0),
    "StateChange-large-ints": m.StateChange(JOB, TaskId("op-a#0"), KeyGroup(INT_MAX), "s", m.StateChangeOp.ADD,
                                            b"\xff" * 300, timestamp=LONG_MAX, epoch=Epoch(LONG_MAX)),
    "StateChange-small-ints": m.StateChange(JOB, TaskId("op-a#0"), KeyGroup(INT_MIN), "s", m.StateChangeOp.DELETE,
                                            b"k", user_key=b"", value=b"", timestamp=LONG_MIN, epoch=Epoch(LONG_MIN)),
    "StateChange-big-value": m.StateChange(JOB, TaskId("op-a#0"), KeyGroup(127), "blob", m.StateChangeOp.PUT,
                                           b"user-1", value=bytes(range(256)) * 400, timestamp=T0, epoch=Epoch(1)),
    "TaskAck-empty-arrays": m.TaskAck(JobId(""), CheckpointId(0), m.TaskSnapshot(TaskId(""), OperatorId(""), 0,
                                      KeyGroup(-1), KeyGroup(-1)), m.TaskTimings(), 0),
    "TaskAck-extremes": m.TaskAck(
        JOB, CheckpointId(LONG_MAX),
        m.TaskSnapshot(TaskId(UNICODE), OperatorId("op-a"), INT_MAX, KeyGroup(INT_MIN), KeyGroup(INT_MAX),
                       (HANDLE, m.StateHandle(m.StateHandleKind.MATERIALIZED, OperatorId(UNICODE), KeyGroup(0),
                                              KeyGroup(0), FILES * 20, LONG_MAX, 0)),
                       tuple(m.SourceOffset(f"t{i}", i, LONG_MAX - i) for i in range(70)), (RANGE,) * 3,
                       (m.SinkTransaction("", -1, INT_MIN),), m.MaterializationRef(MaterializationId(0),
                                                                                    CheckpointId(LONG_MIN))),
        m.TaskTimings(LONG_MAX, LONG_MIN, 0, LONG_MAX), LONG_MAX, Epoch(LONG_MIN)),
    "CheckpointMetadata-many-tasks": m.CheckpointMetadata(
        JOB, CheckpointId(7), CheckpointType.SAVEPOINT, T0, T0, 32_768, (SNAPSHOT,) * 65, Epoch(2), LONG_MAX, 1),
    "JobRegistration-unicode": m.JobRegistration(
        JobId(UNICODE), Epoch(0), CheckpointingMode.AT_LEAST_ONCE, 1, ASSIGNMENTS * 40,
        tuple(TaskId(f"src#{i}") for i in range(100)), LONG_MIN, True, (OperatorId(UNICODE),), INT_MAX,
        "CANCELLED", UNICODE, tuple((0, 1, INT_MAX)[i % 3] for i in range(80))),
    "MaterializationEvent-nulls": m.MaterializationEvent(
        JOB, TaskId("op-a#0"), OperatorId("op-a"), MaterializationId(LONG_MAX), m.MaterializationStatus.STARTED,
        CheckpointId(0), ()),
    "CheckpointTrigger-no-target": m.CheckpointTrigger(JobId(""), CheckpointId(LONG_MIN), CheckpointType.CHECKPOINT,
                                                       CheckpointingMode.EXACTLY_ONCE, 0, Epoch(0), None),
    "Barrier-unicode": m.Barrier(JobId(UNICODE), CheckpointId(1), CheckpointType.CHECKPOINT,
                                 CheckpointingMode.AT_LEAST_ONCE, TaskId(UNICODE), LONG_MAX, Epoch(INT_MAX)),
    "DeadLetter-nested-maps": DeadLetter(
        UNICODE, INT_MIN, LONG_MAX, LONG_MIN, b"", b"\x00" * 1000,
        {UNICODE: b"\xff", "": b"", **{f"h{i}": bytes([i]) * i for i in range(80)}}, UNICODE, UNICODE, "",
        0, {"value": LONG_MAX, "key": LONG_MIN, "": 0}, {UNICODE: UNICODE, "": ""}),
    "DeadLetter-empty-maps": DeadLetter("", 0, 0, None, None, None),
    "RestoreCommand-no-assignments": m.RestoreCommand(JobId(""), "", CheckpointId(0), True, "", 0, 0, (), Epoch(0), 0),
    "CheckpointDiscarded-many-files": m.CheckpointDiscarded(
        JOB, CheckpointId(3), T0, UNICODE, tuple(f"chk-3/{i:05d}.sst" for i in range(200))),
    "ChangelogRange-via-event": m.MaterializationEvent(
        JOB, TaskId("t"), OperatorId("o"), MaterializationId(1), m.MaterializationStatus.COMPLETED, CheckpointId(1),
        (m.ChangelogRange(UNICODE, INT_MAX, SequenceNumber(LONG_MIN), SequenceNumber(LONG_MAX)),), (), LONG_MAX, ""),
}

CASES: dict[str, Any] = {
    **{f"{cls.__name__}-sample{i}": message for cls, samples in SAMPLES.items() for i, message in enumerate(samples)},
    **EDGES,
}


def main() -> int:
    """Write ``golden/<case>.bin`` for every case that has none, with the codec of this checkout."""
    from tidemark.protocol.codec import Codec

    local = Codec.local()
    GOLDEN_DIR.mkdir(exist_ok=True)
    written = 0
    for name, message in CASES.items():
        path = GOLDEN_DIR / f"{name}.bin"
        if not path.exists():
            path.write_bytes(local.encode(message))
            written += 1
    print(f"{written} golden .bin file(s) written to {GOLDEN_DIR}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
