"""Keyed and operator state, as in Flink: descriptors, handles, backends, key groups.

Importing this package registers the heap and RocksDB backends (:mod:`tidemark.state.backend_registry`).
"""

from tidemark.state.backend import (
    KeyedSnapshot,
    KeyedStateBackend,
    KeyNotInRangeError,
    StateRegistrationError,
)
from tidemark.state.descriptors import (
    AggregateFunction,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateKind,
    ValueStateDescriptor,
)
from tidemark.state.handles import (
    AggregatingState,
    ListState,
    MapState,
    ReducingState,
    State,
    ValueState,
)
from tidemark.state.heap.backend import HashMapStateBackend
from tidemark.keygroups import (
    DEFAULT_MAX_PARALLELISM,
    KeyGroupRange,
    assign_to_key_group,
    compute_key_group_range,
    compute_operator_index_for_key_group,
    murmur3_x86_32,
)
from tidemark.state.local_backend import LocalKeyedStateBackend
from tidemark.state.operator import (
    BroadcastState,
    BroadcastStateDescriptor,
    OperatorListState,
    OperatorStateBackend,
)
from tidemark.state.rocksdb.backend import RocksDBStateBackend
from tidemark.state.rocksdb.options import RocksDBOptions
from tidemark.state.backend_registry import BackendContext, create_backend
from tidemark.state.schema_evolution import StateMigrationError
from tidemark.state.serializers import AvroSerializer, DataclassSerializer, Serializer, TaggedSerializer
from tidemark.state.table import KeyedStateChange
from tidemark.state.ttl import ManualClock, StateTtlConfig, SystemClock

__all__ = [
    "AggregateFunction",
    "AggregatingState",
    "AggregatingStateDescriptor",
    "AvroSerializer",
    "BackendContext",
    "BroadcastState",
    "BroadcastStateDescriptor",
    "DataclassSerializer",
    "DEFAULT_MAX_PARALLELISM",
    "HashMapStateBackend",
    "KeyGroupRange",
    "KeyNotInRangeError",
    "KeyedSnapshot",
    "KeyedStateBackend",
    "KeyedStateChange",
    "ListState",
    "ListStateDescriptor",
    "LocalKeyedStateBackend",
    "ManualClock",
    "MapState",
    "MapStateDescriptor",
    "OperatorListState",
    "OperatorStateBackend",
    "ReducingState",
    "ReducingStateDescriptor",
    "RocksDBOptions",
    "RocksDBStateBackend",
    "Serializer",
    "State",
    "StateKind",
    "StateMigrationError",
    "StateRegistrationError",
    "StateTtlConfig",
    "SystemClock",
    "TaggedSerializer",
    "ValueState",
    "ValueStateDescriptor",
    "assign_to_key_group",
    "compute_key_group_range",
    "compute_operator_index_for_key_group",
    "create_backend",
    "murmur3_x86_32",
]
