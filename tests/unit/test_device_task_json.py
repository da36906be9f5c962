"""The task as devices receive and log it: equal to the dataclass's own dict, and a copy of it."""

from __future__ import annotations

import dataclasses

from pfs_device.decision import DeviceTask


def task() -> DeviceTask:
    data_types = {
        "perplexity": {"dataType": "BucketedType", "boundaries": [10, 20.5, 1e3]},
        "nested": {"structure": ["a", {"b": [None, True, [1, 2]]}]},
    }
    return DeviceTask(
        task_key="k", analysis="a", snapshot_digest="d", query="select perplexity from ModelMetrics",
        cohorts=("locale",), encoded_field="perplexity", data_types=data_types, mechanism="asymmetric_ohe",
        epsilon0=4.0, epsilon=1.0, delta=1e-6, sampling_rate=0.5, min_cohort=100, seed=7,
    )  # fmt: skip


def test_as_json_equals_dataclasses_asdict() -> None:
    assert task().as_json() == dataclasses.asdict(task())


def test_changing_the_json_of_a_task_leaves_the_task_alone() -> None:
    original = task()
    sent = original.as_json()
    sent["data_types"]["perplexity"]["boundaries"].append(5e3)
    sent["data_types"]["nested"]["structure"][1]["b"][2].append(3)
    assert original == task()
    assert "seed" not in original.audit_json() and original.audit_json()["data_types"] == task().data_types
