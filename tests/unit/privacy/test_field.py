from __future__ import annotations

import numpy as np
import pytest

from privacy import field


def test_split_then_combine_returns_the_vector() -> None:
    rng = np.random.default_rng(0)
    values = field.to_field(np.array([0, 1, 5, 123456]))
    leader, helper = field.split(values, rng)
    np.testing.assert_array_equal(field.combine(leader, helper), values)


def test_each_share_alone_looks_uniform_whatever_the_value() -> None:
    # The leader's share of a 0 and of a 1 have the same distribution: its top bit is a fair coin.
    rng = np.random.default_rng(1)
    shares = [field.split(field.to_field(np.full(20_000, v)), rng)[1] for v in (0, 1)]
    for share in shares:
        top_bit = (share >> np.uint64(63)).astype(float).mean()
        # p > 2^63, so P(top bit) = (p - 2^63)/p, just under 1/2; 4 standard errors of a mean of 20,000 coins.
        assert abs(top_bit - 0.5) < 4 * 0.5 / np.sqrt(20_000)


def test_add_does_not_overflow_near_the_modulus() -> None:
    big = np.array([field.MODULUS - 1, field.MODULUS - 2], dtype=np.uint64)
    result = field.add(big, np.array([5, field.MODULUS - 1], dtype=np.uint64))
    assert [int(x) for x in result] == [4, field.MODULUS - 3]


def test_sum_of_shares_over_many_uploads_reconstructs_the_total() -> None:
    rng = np.random.default_rng(2)
    reports = rng.integers(0, 2, size=(50, 8))
    pairs = [field.split(field.to_field(r), rng) for r in reports]
    leader = field.field_sum([p[0] for p in pairs], 8)
    helper = field.field_sum([p[1] for p in pairs], 8)
    counts = field.to_counts(field.combine(leader, helper), bound=50)
    np.testing.assert_array_equal(counts, reports.sum(axis=0))


def test_to_counts_refuses_a_value_above_the_report_count() -> None:
    with pytest.raises(ValueError, match="exceeds"):
        field.to_counts(np.array([3, 11], dtype=np.uint64), bound=10)


def test_to_field_refuses_negative_values() -> None:
    with pytest.raises(ValueError):
        field.to_field(np.array([-1]))


def test_signed_values_round_trip_through_shares() -> None:
    values = np.array([-5, 0, 7, -1_234_567, 2**40], dtype=np.int64)
    leader, helper = field.split(field.from_signed(values), np.random.default_rng(3))
    np.testing.assert_array_equal(field.to_signed(field.combine(leader, helper), low=-(2**41), high=2**41), values)


def test_to_signed_refuses_a_value_outside_its_range() -> None:
    with pytest.raises(ValueError, match="outside"):
        field.to_signed(field.from_signed(np.array([-11])), low=-10, high=10)


def test_total_is_the_sum_mod_p_without_overflow() -> None:
    values = np.array([field.MODULUS - 1, field.MODULUS - 1, 5, 2**63], dtype=np.uint64)
    assert field.total(values) == sum(int(v) for v in values) % field.MODULUS


def test_secure_split_masks_are_uniform_residues_below_p() -> None:
    leader, helper = field.split(field.to_field(np.arange(10_000)))
    assert int(leader.max()) < field.MODULUS and int(helper.max()) < field.MODULUS
    np.testing.assert_array_equal(field.combine(leader, helper), np.arange(10_000))
    # The top bit of a uniform residue is 1 with probability (p - 2^63)/p, about 1/2: 4 standard errors.
    assert abs((leader >> np.uint64(63)).mean() - 0.5) < 4 * 0.5 / np.sqrt(10_000)
