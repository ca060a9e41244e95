"""Options of the RocksDB state backend and how they become rocksdict options."""

from __future__ import annotations

from dataclasses import dataclass

import rocksdict


@dataclass(frozen=True, slots=True)
class RocksDBOptions:
    """Memory is bounded by ``block_cache_bytes`` (reads) plus ``write_buffer_total_bytes``
    (memtables of every column family, charged to the same cache)."""

    block_cache_bytes: int = 64 << 20
    write_buffer_bytes: int = 16 << 20  # per column family memtable
    max_write_buffer_number: int = 2
    write_buffer_total_bytes: int = 64 << 20
    disable_wal: bool = True  # safe: state is always restored from checkpoints, never from WAL
    incremental: bool = True  # snapshot() writes native SST sets, reusing uploaded files
    background_jobs: int = 2
    bloom_filter_bits: float = 10.0
    timer_cache_size: int = 128  # timers per key group held in memory by each timer queue


class RocksDBResources:
    """The shared cache and write-buffer manager, kept alive as long as the database."""

    def __init__(self, options: RocksDBOptions) -> None:
        self.options = options
        self.cache = rocksdict.Cache(options.block_cache_bytes)
        self.write_buffers = rocksdict.WriteBufferManager.new_write_buffer_manager_with_cache(
            options.write_buffer_total_bytes, False, self.cache
        )

    def db_options(self) -> rocksdict.Options:
        """Options for the database and every column family (raw bytes mode, never pickle)."""
        opts = rocksdict.Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.create_missing_column_families(True)
        table = rocksdict.BlockBasedOptions()
        table.set_block_cache(self.cache)
        table.set_bloom_filter(self.options.bloom_filter_bits, False)
        table.set_cache_index_and_filter_blocks(True)
        opts.set_block_based_table_factory(table)
        opts.set_write_buffer_size(self.options.write_buffer_bytes)
        opts.set_max_write_buffer_number(self.options.max_write_buffer_number)
        opts.set_write_buffer_manager(self.write_buffers)
        opts.set_max_background_jobs(self.options.background_jobs)
        return opts

    def write_options(self) -> rocksdict.WriteOptions:
        write = rocksdict.WriteOptions()
        write.disable_wal = self.options.disable_wal
        return write
