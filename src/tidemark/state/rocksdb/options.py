"""Options of the RocksDB state backend and how they become rocksdict options: the predefined
profiles, the memory budget several databases share, and a job's options factory per state.

* :class:`RocksDBOptions`: every knob Tidemark sets; :func:`profile_options` gives a predefined
  profile's (Flink's ``PredefinedOptions``: ``default``, ``spinning-disk``,
  ``spinning-disk-high-memory``, ``flash-ssd``).
* :class:`RocksDBMemory`: one block cache and one write-buffer manager charged to it (Flink's
  managed memory). A stage worker gives every RocksDB database of its tasks the same one, sized by
  ``TIDEMARK_ROCKSDB__MEMORY_BYTES``, so the block cache, the memtables and the index and filter
  blocks of all of them stay within that budget whatever the number of tasks; a backend built
  without one gets its own (``block_cache_bytes``, ``write_buffer_total_bytes``).
* An options factory, ``(state name, rocksdict.Options) -> None``, changes the options of each
  state's column family when it is created or opened (``api.RocksDBConfig.options_factory``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import rocksdict

OptionsFactory = Callable[[str, Any], None]  # (state name, rocksdict.Options)


class JobRocksDB(Protocol):
    """What a job sets (``tidemark.api.RocksDBConfig``; the API imports this package, not the reverse)."""

    @property
    def profile(self) -> Any: ...  # an api.RocksDBProfile: its value names a profile

    @property
    def options_factory(self) -> OptionsFactory | None: ...


@dataclass(frozen=True, slots=True)
class RocksDBOptions:
    """Memory is bounded by ``block_cache_bytes`` (reads) plus ``write_buffer_total_bytes``
    (memtables of every column family, charged to the same cache), unless a shared
    :class:`RocksDBMemory` bounds it."""

    block_cache_bytes: int = 64 << 20
    write_buffer_bytes: int = 16 << 20  # per column family memtable
    max_write_buffer_number: int = 2
    min_write_buffer_number_to_merge: int = 1
    write_buffer_total_bytes: int = 64 << 20
    disable_wal: bool = True  # safe: state is always restored from checkpoints, never from WAL
    incremental: bool = True  # snapshot() writes native SST sets, reusing uploaded files
    background_jobs: int = 2
    bloom_filter_bits: float = 10.0
    block_bytes: int = 4 << 10  # the data block size of the SST files
    max_open_files: int = -1  # -1: every SST file stays open
    level_compaction_dynamic_level_bytes: bool = False
    target_file_bytes: int = 64 << 20  # an SST file of level 1 (target_file_size_base)
    max_bytes_for_level_base: int = 256 << 20
    compaction_readahead_bytes: int = 0
    timer_cache_size: int = 128  # timers per key group held in memory by each timer queue


# What each predefined profile changes (Flink's PredefinedOptions, in RocksDB's terms).
PROFILES: dict[str, dict[str, Any]] = {
    "default": {},
    # spinning disks: more background work, big sequential reads, level sizes that follow the data
    "spinning-disk": {"background_jobs": 4, "level_compaction_dynamic_level_bytes": True,
                      "compaction_readahead_bytes": 2 << 20},
    "spinning-disk-high-memory": {"background_jobs": 4, "level_compaction_dynamic_level_bytes": True,
                                  "compaction_readahead_bytes": 2 << 20, "target_file_bytes": 256 << 20,
                                  "max_bytes_for_level_base": 1 << 30, "write_buffer_bytes": 64 << 20,
                                  "max_write_buffer_number": 4, "min_write_buffer_number_to_merge": 3,
                                  "block_cache_bytes": 256 << 20, "block_bytes": 128 << 10},
    # flash: more background work; small blocks stay (random reads are cheap)
    "flash-ssd": {"background_jobs": 4},
}


def profile_options(profile: str, base: RocksDBOptions = RocksDBOptions()) -> RocksDBOptions:
    """``base`` with what the predefined ``profile`` changes; ValueError naming the profiles for another name."""
    if profile not in PROFILES:
        raise ValueError(f"unknown RocksDB profile {profile!r}; profiles: {sorted(PROFILES)}")
    return dataclasses.replace(base, **PROFILES[profile])


class RocksDBMemory:
    """A block cache of ``cache_bytes`` and a write-buffer manager that charges memtables up to
    ``write_buffer_bytes`` to it: every database built with it (and each of its column families)
    shares both, so what they hold in memory stays within ``cache_bytes``."""

    def __init__(self, cache_bytes: int, write_buffer_bytes: int) -> None:
        if not 0 < write_buffer_bytes <= cache_bytes:
            raise ValueError(f"write buffers ({write_buffer_bytes}) must fit in the cache ({cache_bytes})")
        self.cache_bytes = cache_bytes
        self.write_buffer_bytes = write_buffer_bytes
        self.cache = rocksdict.Cache(cache_bytes)
        self.write_buffers = rocksdict.WriteBufferManager.new_write_buffer_manager_with_cache(
            write_buffer_bytes, False, self.cache)

    @classmethod
    def budget(cls, budget_bytes: int, write_buffer_ratio: float = 0.5) -> RocksDBMemory:
        """One budget: memtables take up to ``write_buffer_ratio`` of it, charged to the cache."""
        return cls(budget_bytes, max(1, int(budget_bytes * write_buffer_ratio)))

    def usage(self) -> int:
        """What the cache holds now: blocks, index and filter blocks, and the memtables charged to it."""
        return self.cache.get_usage()


class RocksDBResources:
    """The memory a database uses (its own or a shared :class:`RocksDBMemory`) and how its options
    are built, kept alive as long as the database."""

    def __init__(self, options: RocksDBOptions, memory: RocksDBMemory | None = None,
                 options_factory: OptionsFactory | None = None) -> None:
        self.options = options
        self.memory = memory or RocksDBMemory(options.block_cache_bytes, options.write_buffer_total_bytes)
        self.options_factory = options_factory

    def db_options(self, state: str | None = None) -> rocksdict.Options:
        """Options for the database and its column families (raw bytes mode, never pickle); the
        column family of ``state`` gets what the options factory changes too."""
        o = self.options
        opts = rocksdict.Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.create_missing_column_families(True)
        table = rocksdict.BlockBasedOptions()
        table.set_block_cache(self.memory.cache)
        table.set_bloom_filter(o.bloom_filter_bits, False)
        table.set_cache_index_and_filter_blocks(True)
        table.set_block_size(o.block_bytes)
        opts.set_block_based_table_factory(table)
        opts.set_write_buffer_size(o.write_buffer_bytes)
        opts.set_max_write_buffer_number(o.max_write_buffer_number)
        opts.set_min_write_buffer_number_to_merge(o.min_write_buffer_number_to_merge)
        opts.set_write_buffer_manager(self.memory.write_buffers)
        opts.set_max_background_jobs(o.background_jobs)
        opts.set_max_open_files(o.max_open_files)
        opts.set_level_compaction_dynamic_level_bytes(o.level_compaction_dynamic_level_bytes)
        opts.set_target_file_size_base(o.target_file_bytes)
        opts.set_max_bytes_for_level_base(o.max_bytes_for_level_base)
        opts.set_compaction_readahead_size(o.compaction_readahead_bytes)
        if state is not None and self.options_factory is not None:
            self.options_factory(state, opts)
        return opts

    def write_options(self) -> rocksdict.WriteOptions:
        write = rocksdict.WriteOptions()
        write.disable_wal = self.options.disable_wal
        return write


@dataclass(frozen=True)
class RocksDBSetup:
    """What the RocksDB backends of a worker are built with (``BackendContext.backend_options``):
    the options (a profile's), the memory they share, and the job's options factory."""

    options: RocksDBOptions = RocksDBOptions()
    memory: RocksDBMemory | None = None
    options_factory: OptionsFactory | None = None

    @classmethod
    def of(cls, config: JobRocksDB, memory: RocksDBMemory | None = None) -> RocksDBSetup:
        """A job's RocksDB configuration (its profile and options factory) with ``memory``."""
        return cls(profile_options(config.profile.value), memory, config.options_factory)
