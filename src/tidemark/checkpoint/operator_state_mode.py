"""How an operator-state handle is redistributed on restore (Flink: OperatorStateHandle.Mode).

The wire ``StateHandle`` has no field for the mode, so the mode is carried as data in the names
of the handle's files: a worker writing operator state names each file with
:func:`operator_state_file_name`, whose suffix ``.opstate-<mode>`` the planner reads back with
:func:`operator_state_mode`. A handle without the suffix is ``SPLIT_DISTRIBUTE`` (Flink's default for
``getListState``). All files of one handle must carry the same mode.
"""

from __future__ import annotations

import posixpath

from tidemark.protocol.messages import StateHandle, StateHandleKind
from tidemark.types import OperatorStateMode

_SUFFIX = ".opstate-"


_FILE_MODES = {OperatorStateMode.SPLIT_DISTRIBUTE: "split", OperatorStateMode.UNION: "union",
               OperatorStateMode.BROADCAST: "broadcast"}  # as file names carry them
_MODES_OF_FILES = {suffix: mode for mode, suffix in _FILE_MODES.items()}


def operator_state_file_name(state_name: str, mode: OperatorStateMode, part: int = 0) -> str:
    """File name (no directory) for part ``part`` of operator state ``state_name``."""
    if not state_name or "/" in state_name:
        raise ValueError(f"bad operator state name: {state_name!r}")
    return f"{state_name}.{part}{_SUFFIX}{_FILE_MODES[mode]}"


def operator_state_mode(handle: StateHandle) -> OperatorStateMode:
    """The redistribution mode of an ``OPERATOR`` handle, read from its file names."""
    if handle.kind is not StateHandleKind.OPERATOR:
        raise ValueError(f"not an operator state handle: {handle.kind}")
    modes = {_mode_of(posixpath.basename(f.path)) for f in handle.files}
    if len(modes) > 1:
        raise ValueError(f"operator state handle mixes modes {sorted(m.value for m in modes)}")
    return modes.pop() if modes else OperatorStateMode.SPLIT_DISTRIBUTE


def _mode_of(name: str) -> OperatorStateMode:
    _, sep, mode = name.rpartition(_SUFFIX)
    if not sep:
        return OperatorStateMode.SPLIT_DISTRIBUTE
    try:
        return _MODES_OF_FILES[mode]
    except KeyError:
        raise ValueError(f"unknown operator state mode in file name {name!r}") from None
