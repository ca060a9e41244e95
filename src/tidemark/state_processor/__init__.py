"""The state processor: reading a job's retained checkpoints and savepoints outside the job.

* :mod:`.source` finds the ``_metadata`` an operator names (a retained id or a path) and says
  which stage and state exist, with one-line errors (:class:`StateSourceError`);
* :mod:`.metadata_view` is what a snapshot records, stage by stage (``tidemark state inspect``);
* :mod:`.task_restore` restores one old task's keyed state into a scratch backend of the kind
  that wrote it, through the workers' own restore, and hands back its canonical entries;
* :mod:`.rows` decodes those entries into rows with the serializers the snapshot records;
* :mod:`.reader` is the Python reader over all of it, one old task at a time
  (``tidemark state read``, and the Spark data source ``tidemark-state``,
  :mod:`tidemark.spark.state_source`).

Writing (``tidemark state bootstrap|transform``; from a DataFrame,
:mod:`tidemark.spark.state_bootstrap`):

* :mod:`.encoding` turns values into canonical entries, the inverse of :mod:`.rows`;
* :mod:`.task_writer` writes new tasks' keyed state through the backends' own canonical snapshots;
* :mod:`.writer` lays a savepoint out in checkpoint storage, writes its ``_metadata`` and verifies it;
* :mod:`.bootstrap` writes a savepoint from rows, :mod:`.transform` derives one from a checkpoint
  or savepoint.

Reading never writes to checkpoint storage; writing writes only the new savepoint's folder.
See docs/guide/state-processor.md.
"""

from tidemark.state_processor.bootstrap import StateData, bootstrap_savepoint
from tidemark.state_processor.metadata_view import CheckpointView, inspect_checkpoint
from tidemark.state_processor.reader import ReadPartition, StateReader
from tidemark.state_processor.rows import StateRow, json_compatible
from tidemark.state_processor.source import (
    StateSource,
    StateSourceError,
    UnknownStage,
    UnknownState,
    open_source,
)
from tidemark.state_processor.transform import (
    MapState,
    RemoveStage,
    RemoveState,
    RenameStage,
    SetState,
    transform_savepoint,
)
from tidemark.state_processor.writer import WriteOptionError, WrittenSavepoint

__all__ = [
    "CheckpointView",
    "MapState",
    "RemoveStage",
    "RemoveState",
    "RenameStage",
    "SetState",
    "StateData",
    "WriteOptionError",
    "WrittenSavepoint",
    "bootstrap_savepoint",
    "transform_savepoint",
    "ReadPartition",
    "StateReader",
    "StateRow",
    "StateSource",
    "StateSourceError",
    "UnknownStage",
    "UnknownState",
    "inspect_checkpoint",
    "json_compatible",
    "open_source",
]
