"""Key groups: murmur3 vectors, pinned key groups, the key-bytes rule and Flink's formulas for every pair."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from tidemark.state import (
    KeyGroupRange,
    assign_to_key_group,
    compute_key_group_range,
    compute_operator_index_for_key_group,
    murmur3_x86_32,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark.keygroups import (
    decode_key,
    hash_key_bytes,
    encode_key,
    key_to_bytes,
    operator_index,
    range_end,
    range_start,
)

# Published MurmurHash3_x86_32 vectors (SMHasher / Wikipedia test set).
VECTORS = [
    (b"", 0, 0x00000000),
    (b"", 1, 0x514E28B7),
    (b"", 0xFFFFFFFF, 0x81F16F39),
    (b"\xff\xff\xff\xff", 0, 0x76293B50),
    (b"\x21\x43\x65\x87", 0, 0xF55B516B),
    (b"\x21\x43\x65\x87", 0x5082EDEE, 0x2362F9DE),
    (b"\x21\x43\x65", 0, 0x7E4A8634),
    (b"\x21\x43", 0, 0xA0F7B07A),
    (b"\x21", 0, 0x72661CF4),
    (b"\x00\x00\x00\x00", 0, 0x2362F9DE),
    (b"aaaa", 0x9747B28C, 0x5A97808A),
    (b"Hello, world!", 0x9747B28C, 0x24884CBA),
    (b"The quick brown fox jumps over the lazy dog", 0x9747B28C, 0x2FA826CD),
]


# Key groups of keys at max_parallelism 128 and 32768: what every restore and every other
# implementation of the key-bytes rule must reproduce (unsigned hash, seed 0).
KEY_GROUPS = [
    ("a", 0x3C2569B2, 50, 27058),
    ("user-42", 0xB972DAD0, 80, 23248),
    (b"\xffraw", 0xA9E0CEF9, 121, 20217),
    (0, 0x63852AFC, 124, 11004),
    (-1, 0x627564E8, 104, 25832),
    (2**62, 0x343124F2, 114, 9458),
    ("ключ", 0x9A592042, 66, 8258),
    ("/index.html", 0x70D838C7, 71, 14535),
]


@pytest.mark.parametrize(("data", "seed", "expected"), VECTORS)
def test_murmur3_known_vectors(data: bytes, seed: int, expected: int) -> None:
    assert murmur3_x86_32(data, seed) == expected
    if seed == 0:
        assert hash_key_bytes(data) == expected


def test_murmur3_seed_is_taken_modulo_2_to_the_32() -> None:
    assert murmur3_x86_32(b"", -1) == murmur3_x86_32(b"", 0xFFFFFFFF) == 0x81F16F39
    assert murmur3_x86_32(b"", 1 + (1 << 32)) == 0x514E28B7


@pytest.mark.parametrize(("key", "hashed", "group_128", "group_32768"), KEY_GROUPS)
def test_pinned_key_groups(key: object, hashed: int, group_128: int, group_32768: int) -> None:
    assert hash_key_bytes(key_to_bytes(key)) == hashed
    assert assign_to_key_group(key, 128) == group_128
    assert assign_to_key_group(key, 32768) == group_32768


@settings(max_examples=300)
@given(st.binary(max_size=80))
def test_hash_is_an_unsigned_32_bit_integer(data: bytes) -> None:
    assert 0 <= hash_key_bytes(data) < 1 << 32


def test_key_bytes_rule() -> None:
    assert key_to_bytes("héllo") == "héllo".encode()
    assert key_to_bytes(b"\x00\x01") == b"\x00\x01"
    assert key_to_bytes(-2) == b"\xff" * 7 + b"\xfe"
    assert key_to_bytes(1) == struct.pack(">q", 1)
    for bad in (True, 1.5, None, (1,), bytearray(b"x")):
        with pytest.raises(TypeError):
            key_to_bytes(bad)
    with pytest.raises(ValueError):
        key_to_bytes(1 << 63)


def test_assign_to_key_group_is_murmur_of_key_bytes_modulo() -> None:
    for key in ("a", "user-42", b"\xffraw", 0, -1, 2**62, "ключ"):
        expected = murmur3_x86_32(key_to_bytes(key)) % 128
        assert assign_to_key_group(key, 128) == expected
    assert assign_to_key_group("", 1) == 0


def test_stored_key_round_trip_keeps_types_apart() -> None:
    for key in ("1", b"1", 1, -7, "", b""):
        assert decode_key(encode_key(key)) == key
        assert type(decode_key(encode_key(key))) is type(key)
    assert len({encode_key("1"), encode_key(b"1"), encode_key(49)}) == 3


def test_public_functions_match_flink_examples() -> None:
    assert compute_key_group_range(128, 3, 0) == KeyGroupRange(0, 42)
    assert compute_key_group_range(128, 3, 1) == KeyGroupRange(43, 85)
    assert compute_key_group_range(128, 3, 2) == KeyGroupRange(86, 127)
    assert compute_operator_index_for_key_group(128, 3, 42) == 0
    assert compute_operator_index_for_key_group(128, 3, 43) == 1
    with pytest.raises(ValueError):
        compute_key_group_range(4, 5, 0)
    with pytest.raises(ValueError):
        compute_operator_index_for_key_group(4, 2, 4)


def test_public_functions_agree_with_kernels_on_a_sample() -> None:
    rng = np.random.default_rng(7)
    for _ in range(300):
        max_p = int(rng.integers(1, 1025))
        p = int(rng.integers(1, max_p + 1))
        for index in {0, p - 1, int(rng.integers(0, p))}:
            kgr = compute_key_group_range(max_p, p, index)
            assert (kgr.start, kgr.end) == (range_start(max_p, p, index), range_end(max_p, p, index))
            for kg in (kgr.start, kgr.end):
                assert compute_operator_index_for_key_group(max_p, p, kg) == index


def test_flink_formulas_hold_for_every_pair_up_to_1024() -> None:
    """For every 1 <= p <= max_p <= 1024: ranges are non-empty, contiguous and cover
    [0, max_p), and both ends of every range map back to its subtask. As operator_index is
    monotone in the key group, that makes every range exactly the preimage of its subtask."""
    top = 1024
    counts = np.arange(1, top + 1, dtype=np.int32)
    p_all = np.repeat(counts, counts)  # pairs (p, i) ordered by p: prefixes serve every max_p
    i_all = (np.arange(p_all.size) - np.repeat(np.cumsum(counts) - counts, counts)).astype(np.int32)
    later_all = i_all[1:] > 0
    lasts = np.cumsum(counts) - 1  # position of (p, p - 1)
    firsts = lasts - counts + 1  # position of (p, 0)
    for max_p in range(1, top + 1):
        n = max_p * (max_p + 1) // 2
        p, i = p_all[:n], i_all[:n]
        start, end = range_start(max_p, p, i), range_end(max_p, p, i)
        assert np.all(start <= end)
        later = later_all[: n - 1]
        assert np.all((start[1:] == end[:-1] + 1) | ~later)
        assert np.all(start[firsts[:max_p]] == 0)
        assert np.all(end[lasts[:max_p]] == max_p - 1)
        assert np.all(operator_index(max_p, p, start) == i)
        assert np.all(operator_index(max_p, p, end) == i)


def test_key_group_range_helpers() -> None:
    kgr = KeyGroupRange(3, 7)
    assert len(kgr) == 5 and 3 in kgr and 8 not in kgr and list(kgr)[-1] == 7
    assert kgr.intersection(KeyGroupRange(6, 9)) == KeyGroupRange(6, 7)
    assert len(kgr.intersection(KeyGroupRange(8, 9))) == 0
    with pytest.raises(ValueError):
        KeyGroupRange(5, 2)
