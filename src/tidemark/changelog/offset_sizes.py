"""How many bytes lie between two offsets of a changelog partition (for the pending and truncated
byte metrics), without keeping a number per record.

Lifecycle: ``PartitionSizes(start)`` -> ``add(offset, size)`` for every record read, offsets
increasing -> ``bytes_between(low, high)`` at any time -> ``drop_before(offset)`` once the
partition is truncated there. Records are counted in blocks of ``block_records`` consecutive
records; a block that ``[low, high)`` cuts is counted in proportion to the offsets it covers, so
a result is exact to within one block at each end.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass


@dataclass(slots=True)
class _Block:
    first: int
    last: int
    records: int
    size: int


class PartitionSizes:
    """Record bytes of one partition from ``start`` up to ``end`` (the next offset expected)."""

    def __init__(self, start: int = 0, *, block_records: int = 1024) -> None:
        if block_records < 1:
            raise ValueError(f"block_records must be >= 1, got {block_records}")
        self.start = start
        self.end = start
        self.block_records = block_records
        self._blocks: list[_Block] = []
        self._firsts: list[int] = []

    def add(self, offset: int, size: int) -> None:
        """Count one record; records before ``end`` (seen already) are ignored."""
        if offset < self.end:
            return
        last = self._blocks[-1] if self._blocks else None
        if last is None or last.records >= self.block_records:
            self._blocks.append(_Block(offset, offset, 1, size))
            self._firsts.append(offset)
        else:
            last.last, last.records, last.size = offset, last.records + 1, last.size + size
        self.end = offset + 1

    def bytes_between(self, low: int, high: int) -> int:
        """Bytes of the records with ``low <= offset < high`` (of those indexed)."""
        if high <= low or not self._blocks:
            return 0
        total = 0.0
        for block in self._blocks[max(0, bisect_right(self._firsts, low) - 1):]:
            if block.first >= high:
                break
            span = block.last + 1 - block.first
            inside = min(block.last + 1, high) - max(block.first, low)
            if inside >= span:
                total += block.size
            elif inside > 0:
                total += block.size * inside / span
        return round(total)

    @property
    def total(self) -> int:
        """Bytes of every record indexed."""
        return sum(b.size for b in self._blocks)

    def drop_before(self, offset: int) -> None:
        """Forget the blocks that end before ``offset`` (the partition is truncated there)."""
        keep = 0
        while keep < len(self._blocks) and self._blocks[keep].last < offset:
            keep += 1
        if keep:
            del self._blocks[:keep]
            del self._firsts[:keep]
        self.start = max(self.start, offset)
        self.end = max(self.end, offset)
