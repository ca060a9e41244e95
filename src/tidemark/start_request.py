"""How a job starts, and the start rules, in one place for every way of starting a job
(``tidemark jobs run``, ``tidemark jobs submit``, the API's ``POST /runs`` body).

A start resumes the job's newest retained checkpoint or savepoint unless it names one
(``from_checkpoint`` by id, ``from_savepoint`` by path relative to checkpoint storage) or asks for
empty state (``fresh``, which ``start_id`` may name so that a restart of that deployment resumes
what it retained since); ``force`` starts as asked even over newer state or committed output;
``allow_non_restored_state`` restores a checkpoint or savepoint holding state that no stage of
the job claims (a stage renamed or removed), dropping that state, where a start would otherwise
be refused (:mod:`tidemark.runtime.supervisor.state_claims`).

The rules: at most one of ``from_checkpoint`` and ``from_savepoint``; neither with ``fresh``;
``start_id`` only with ``fresh`` and of the start-id form. :class:`StartRequest` is frozen and
checks them when it is made, so a value of it is a valid start. Each surface spells the options
its own way (``--from-checkpoint`` on the command line, ``from_checkpoint`` in the API):
:meth:`StartRequest.of` names the broken rule's options with the caller's spelling.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

_START_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
API_FIELDS = ("from_checkpoint", "from_savepoint", "fresh", "force", "allow_non_restored_state")


class StartRuleError(ValueError):
    """A start that breaks a start rule; the message names the rule."""


def command_line_option(name: str) -> str:
    """``from_checkpoint`` as the command line spells it: ``--from-checkpoint``."""
    return "--" + name.replace("_", "-")


def validate_start_id(value: str, spell: Callable[[str], str] = command_line_option) -> str:
    """``value`` if usable as a start id (1-128 letters, digits, ``._:-``); else StartRuleError."""
    if not _START_ID.fullmatch(value):
        raise StartRuleError(f"{spell('start_id')} must be 1-128 letters, digits or '._:-' starting with a letter "
                             f"or digit, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class StartRequest:
    """Where a job's first attempt starts (see the module docstring); the default resumes the
    job's newest retained state."""

    from_checkpoint: int | None = None
    from_savepoint: str | None = None
    fresh: bool = False
    force: bool = False
    start_id: str | None = None
    allow_non_restored_state: bool = False

    def __post_init__(self) -> None:
        _check(str, self.from_checkpoint, self.from_savepoint, self.fresh, self.start_id)

    @classmethod
    def of(cls, *, spell: Callable[[str], str] = str, from_checkpoint: int | None = None,
           from_savepoint: str | None = None, fresh: bool = False, force: bool = False,
           start_id: str | None = None, allow_non_restored_state: bool = False) -> StartRequest:
        """The start, or StartRuleError naming the broken rule's options as ``spell`` spells them."""
        _check(spell, from_checkpoint, from_savepoint, fresh, start_id)
        return cls(from_checkpoint, from_savepoint, fresh, force, start_id, allow_non_restored_state)

    @property
    def names_source(self) -> bool:
        """True when the start names a checkpoint or savepoint to restore."""
        return self.from_checkpoint is not None or self.from_savepoint is not None

    def api_fields(self) -> dict[str, Any]:
        """The start as the API's run body and run document spell it (``start_id`` is the command
        line's only)."""
        return {name: getattr(self, name) for name in API_FIELDS}

    @classmethod
    def from_api_fields(cls, document: Mapping[str, Any]) -> StartRequest:
        """The start a run document holds (a field it lacks, e.g. in a record an older coordinator
        wrote, takes its default)."""
        checkpoint = document.get("from_checkpoint")
        return cls(None if checkpoint is None else int(checkpoint), document.get("from_savepoint"),
                   bool(document.get("fresh", False)), bool(document.get("force", False)),
                   allow_non_restored_state=bool(document.get("allow_non_restored_state", False)))

    def command_line(self) -> list[str]:
        """The options of ``tidemark jobs run`` that make this start."""
        options: list[str] = []
        for option in fields(self):
            value = getattr(self, option.name)
            if isinstance(value, bool):
                options += [command_line_option(option.name)] if value else []
            elif value is not None:
                options += [command_line_option(option.name), str(value)]
        return options


def _check(spell: Callable[[str], str], from_checkpoint: int | None, from_savepoint: str | None, fresh: bool,
           start_id: str | None) -> None:
    """Raise StartRuleError when a start so made breaks a rule."""
    if from_checkpoint is not None and from_savepoint is not None:
        raise StartRuleError(f"give at most one of {spell('from_checkpoint')} and {spell('from_savepoint')}")
    if fresh and (from_checkpoint is not None or from_savepoint is not None):
        raise StartRuleError(f"{spell('fresh')} starts with empty state; it cannot be combined with "
                             f"{spell('from_checkpoint')} or {spell('from_savepoint')}")
    if start_id is not None:
        if not fresh:
            raise StartRuleError(f"{spell('start_id')} only applies with {spell('fresh')} (every other start "
                                 f"resumes newer state by itself)")
        validate_start_id(start_id, spell)


__all__ = ["API_FIELDS", "StartRequest", "StartRuleError", "command_line_option", "validate_start_id"]
