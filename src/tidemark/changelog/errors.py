"""Errors of the changelog layer."""

from __future__ import annotations


class ChangelogWriteError(RuntimeError):
    """A change could not be made durable; the writer is failed and the task must fail over."""


class ChangelogReadError(RuntimeError):
    """A changelog range could not be read exactly (missing start record, unreachable end,
    undecodable record inside a range); a restore never continues with less than the ranges."""
