"""Byte counts between offsets of a changelog partition, kept as block sums."""

from __future__ import annotations

import pytest

from tidemark.changelog.offset_sizes import PartitionSizes


def filled(start: int, sizes: list[int], block: int) -> PartitionSizes:
    index = PartitionSizes(start, block_records=block)
    for offset, size in enumerate(sizes, start):
        index.add(offset, size)
    return index


def test_whole_blocks_are_exact_and_cut_blocks_proportional() -> None:
    index = filled(10, [10] * 8 + [100] * 4, block=4)  # blocks [10,14) [14,18) [18,22)
    assert index.total == 480 and index.end == 22
    assert index.bytes_between(10, 22) == 480
    assert index.bytes_between(14, 18) == 40
    assert index.bytes_between(18, 20) == 200  # half of a block of 400
    assert index.bytes_between(0, 11) == 10
    assert index.bytes_between(22, 30) == 0 and index.bytes_between(15, 15) == 0


def test_records_already_seen_are_ignored_and_gaps_are_allowed() -> None:
    index = PartitionSizes(0, block_records=2)
    for offset in (0, 1, 1, 0, 5, 9):
        index.add(offset, 1)
    assert index.total == 4 and index.end == 10
    assert index.bytes_between(2, 10) == 2


def test_dropping_before_a_truncation_point() -> None:
    index = filled(0, [1] * 10, block=3)
    index.drop_before(7)
    assert index.start == 7 and index.bytes_between(0, 10) == 4  # the block [6, 9) is kept whole
    index.drop_before(100)
    assert index.total == 0 and index.end == 100
    index.add(50, 5)  # before the new end: ignored
    assert index.total == 0


def test_block_size_must_be_positive() -> None:
    with pytest.raises(ValueError):
        PartitionSizes(0, block_records=0)
