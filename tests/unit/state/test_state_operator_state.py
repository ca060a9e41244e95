"""Operator state: even-split, union and broadcast redistribution at a new parallelism."""

from __future__ import annotations

import pytest

from tidemark.state import BroadcastStateDescriptor, ListStateDescriptor, OperatorStateBackend
from tidemark.state.rescale import redistribute_list, split_evenly
from tidemark.types import OperatorStateMode

SPLIT, UNION = ListStateDescriptor("offsets"), ListStateDescriptor("seen")
RULES = BroadcastStateDescriptor("rules")


def snapshot_at(storage, parallelism: int, checkpoint_id: int = 1):
    handles = []
    for index in range(parallelism):
        backend = OperatorStateBackend(operator_id="op", subtask_index=index, parallelism=parallelism)
        backend.get_list_state(SPLIT).add_all([f"{index}-{i}" for i in range(index + 3)])
        backend.get_union_list_state(UNION).add(index)
        backend.get_broadcast_state(RULES).put_all({"threshold": 5, "mode": ("strict", b"\x01")})
        handles += backend.snapshot(checkpoint_id, storage)
    return handles


def restore_at(storage, handles, parallelism: int):
    result = []
    for index in range(parallelism):
        backend = OperatorStateBackend(operator_id="op", subtask_index=index, parallelism=parallelism)
        backend.restore(list(reversed(handles)), storage)  # order of handles does not matter
        result.append((backend.get_list_state(SPLIT).get(),
                       backend.get_union_list_state(UNION).get(),
                       dict(backend.get_broadcast_state(RULES).items())))
    return result


@pytest.mark.parametrize("new_parallelism", [1, 2, 3, 5, 20])
def test_redistribution_at_new_parallelism(storage, new_parallelism: int) -> None:
    handles = snapshot_at(storage, 3)
    restored = restore_at(storage, handles, new_parallelism)
    everything = [f"{index}-{i}" for index in range(3) for i in range(index + 3)]
    split_parts = [r[0] for r in restored]
    assert [x for part in split_parts for x in part] == everything  # each element exactly once
    sizes = [len(part) for part in split_parts]
    assert max(sizes) - min(sizes) <= 1 or new_parallelism == 3
    for _, union, rules in restored:
        assert sorted(union) == [0, 1, 2]
        assert rules == {"threshold": 5, "mode": ("strict", b"\x01")}


def test_same_parallelism_keeps_each_subtask_list(storage) -> None:
    restored = restore_at(storage, snapshot_at(storage, 3), 3)
    assert [r[0][0] for r in restored] == ["0-0", "1-0", "2-0"]
    assert [len(r[0]) for r in restored] == [3, 4, 5]


def test_split_evenly_matches_flink() -> None:
    items = list(range(10))
    assert [split_evenly(items, 4, i) for i in range(4)] == [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]
    assert redistribute_list([[1], [2, 3]], OperatorStateMode.BROADCAST, 3, 2) == [1]


def test_mode_conflict_is_refused() -> None:
    backend = OperatorStateBackend()
    backend.get_list_state(SPLIT)
    with pytest.raises(ValueError):
        backend.get_union_list_state(SPLIT)


def test_operator_and_broadcast_state_evolve_their_avro_schema_or_refuse_in_one_line(storage) -> None:
    from dataclasses import dataclass

    from tidemark.state import DataclassSerializer, StateMigrationError

    @dataclass
    class Rule:
        name: str
        limit: int

    @dataclass
    class RuleV2:
        name: str
        limit: int
        enabled: bool = True

    RuleV2.__name__ = "Rule"
    before = OperatorStateBackend(operator_id="op", subtask_index=0, parallelism=1)
    before.get_union_list_state(ListStateDescriptor("pending", serializer=DataclassSerializer(Rule))).add(Rule("a", 1))
    before.get_broadcast_state(BroadcastStateDescriptor("rules", value_serializer=DataclassSerializer(Rule))).put(
        "a", Rule("a", 5))
    handles = before.snapshot(1, storage)
    after = OperatorStateBackend(operator_id="op", subtask_index=0, parallelism=1)
    after.restore(handles, storage)
    pending = after.get_union_list_state(ListStateDescriptor("pending", serializer=DataclassSerializer(RuleV2)))
    rules = after.get_broadcast_state(BroadcastStateDescriptor("rules", value_serializer=DataclassSerializer(RuleV2)))
    assert pending.get() == [RuleV2("a", 1)] and dict(rules.items()) == {"a": RuleV2("a", 5, enabled=True)}

    @dataclass
    class RuleBroken:
        name: str
        limit: str  # long -> string: no promotion

    RuleBroken.__name__ = "Rule"
    refused = OperatorStateBackend(operator_id="op", subtask_index=0, parallelism=1)
    refused.restore(handles, storage)
    with pytest.raises(StateMigrationError, match=r"^state 'rules' cannot be restored: its Avro schema cannot read"):
        refused.get_broadcast_state(BroadcastStateDescriptor("rules", value_serializer=DataclassSerializer(RuleBroken)))
