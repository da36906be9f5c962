"""The task as devices receive and log it: the dataclass's own dict with its privacy parameters
spread flat (as devices have always read them), a copy of it, and read back to the same task."""

from __future__ import annotations

import dataclasses

import pytest

from pfs_device.decision import DeviceTask
from privacy.encoding import content_encoding
from privacy.parameters import PRIVACY_KEYS, PrivacyParameters

PRIVACY = PrivacyParameters(
    noise="client", mechanism="asymmetric_ohe", epsilon0=4.0, epsilon=1.0, delta=1e-6, sampling_rate=0.5, min_cohort=100
)


def task() -> DeviceTask:
    data_types = {
        "perplexity": {"dataType": "BucketedType", "boundaries": [10, 20.5, 1e3]},
        "nested": {"structure": ["a", {"b": [None, True, [1, 2]]}]},
    }
    return DeviceTask(
        task_key="k", analysis="a", snapshot_digest="d", query="select perplexity from ModelMetrics",
        cohorts=("locale",), encoded_field="perplexity", data_types=data_types, privacy=PRIVACY, seed=7,
    )  # fmt: skip


def test_as_json_is_the_dataclass_dict_with_the_privacy_parameters_flat() -> None:
    expected = dataclasses.asdict(task())
    del expected["parsed"]
    expected.update(expected.pop("privacy"))
    assert task().as_json() == expected
    assert set(PRIVACY_KEYS) <= set(task().audit_json()) and "privacy" not in task().audit_json()


def test_changing_the_json_of_a_task_leaves_the_task_alone() -> None:
    original = task()
    sent = original.as_json()
    sent["data_types"]["perplexity"]["boundaries"].append(5e3)
    sent["data_types"]["nested"]["structure"][1]["b"][2].append(3)
    assert original == task()
    assert "seed" not in original.audit_json() and original.audit_json()["data_types"] == task().data_types


def test_a_task_reads_back_from_its_json_and_from_the_wire() -> None:
    assert DeviceTask.from_json(task().as_json()) == task()
    received = DeviceTask.from_wire(task().audit_json())
    assert received == dataclasses.replace(task(), seed=0) and received.privacy == PRIVACY


def test_a_task_from_before_aggregator_noise_reads_as_client_noise() -> None:
    old = task().audit_json()
    del old["noise"], old["token_key"]
    assert DeviceTask.from_wire(old).privacy == PRIVACY and DeviceTask.from_wire(old).token_key == ""


def test_a_parse_handed_over_is_used_and_never_sent() -> None:
    parsed = content_encoding({"perplexity": task().data_types["perplexity"]})
    handed = dataclasses.replace(task(), parsed=parsed)
    assert handed.parsed_content is parsed
    assert handed == task() and handed.as_json() == task().as_json()


@pytest.mark.parametrize("key", ["parsed", "privacy", "typo"])
def test_a_task_with_a_key_devices_do_not_read_is_refused(key: str) -> None:
    with pytest.raises(TypeError):
        DeviceTask.from_wire({**task().audit_json(), key: {}})
