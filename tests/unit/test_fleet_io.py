"""Fleets from the command line: synthetic creation, JSONL import, validation, and `manage.py fleet`."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from django.core.management import CommandError, call_command

from devices.fleet_io import FleetInvalid, fleet_create, fleet_import
from devices.models import Fleet, FleetShard
from devices.synthetic import HISTORY_DAYS, LOCALES, TOKENS, generate_shard
from pfs_device.columns import pack, unpack

NOW = 1_714_521_600.0  # 2024-05-01T00:00:00Z

DEVICES = [
    {
        "id": "d1",
        "profile": {"age": 34, "locale": "en_US"},
        "keyboard": ["Hello world", {"text": "i went home", "time": "2024-04-30T22:00:00+02:00"}],
        "metrics": {"perplexity": 41.2},
    },
    {"id": "d2", "profile": {"locale": "fr_FR"}, "keyboard": [{"text": "hello", "time": 1_714_000_000}]},
    {"id": "d3"},
    {"id": "d4", "profile": {"age": 61.5, "locale": None}, "keyboard": [], "metrics": {}},
    {"id": "d5", "keyboard": [{"text": "world  hello  world"}]},
]


def write_jsonl(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "fleet.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def good_lines() -> list[str]:
    return [json.dumps(device) for device in DEVICES]


def shard_columns(name: str) -> list[dict]:
    return [shard.load_columns() for shard in FleetShard.objects.filter(fleet__name=name).order_by("index")]


def fleet_columns(name: str) -> dict:
    shards = shard_columns(name)
    return {key: [shard[key] for shard in shards] for key in shards[0]}


def phrases_of(columns: dict, vocabulary: list[str]) -> list[list[str]]:
    """Each device's phrases as text, decoded the slow way (tests may loop)."""
    devices = []
    for device in range(columns["phrase_start"].size - 1):
        phrases = []
        for phrase in range(columns["phrase_start"][device], columns["phrase_start"][device + 1]):
            codes = columns["tokens"][columns["token_start"][phrase] : columns["token_start"][phrase + 1]]
            phrases.append(" ".join(vocabulary[code] for code in codes))
        devices.append(phrases)
    return devices


def assert_nothing_written() -> None:
    assert not Fleet.objects.exists()
    assert not FleetShard.objects.exists()


# ---------------------------------------------------------------- import


def test_fleet_import_stores_every_device_in_shards_of_the_requested_size(db, tmp_path) -> None:
    fleet = fleet_import(name="imported", path=write_jsonl(tmp_path, good_lines()), shard_size=2, now=NOW)
    assert (fleet.size, fleet.seed) == (5, None)
    assert list(fleet.shards.order_by("index").values_list("size", flat=True)) == [2, 2, 1]
    columns = {key: np.concatenate(parts) for key, parts in fleet_columns("imported").items() if key != "phrase_start"}
    assert columns["device_id"].tolist() == ["d1", "d2", "d3", "d4", "d5"]
    np.testing.assert_array_equal(columns["age"], np.array([34, np.nan, np.nan, 61.5, np.nan], dtype=np.float32))
    np.testing.assert_array_equal(columns["perplexity"], np.array([41.2, np.nan, np.nan, np.nan, np.nan], np.float32))


def test_fleet_import_builds_the_vocabularies_from_the_file(db, tmp_path) -> None:
    fleet = fleet_import(name="imported", path=write_jsonl(tmp_path, good_lines()), shard_size=2, now=NOW)
    # Locales sorted by name, "unknown" for profiles without one; tokens by count, ties by name.
    assert fleet.vocabularies == {
        "locale": ["en_US", "fr_FR", "unknown"],
        "tokens": ["hello", "world", "home", "i", "went"],
    }
    locales = np.concatenate(fleet_columns("imported")["locale"])
    assert [fleet.vocabularies["locale"][code] for code in locales] == [
        "en_US",
        "fr_FR",
        "unknown",
        "unknown",
        "unknown",
    ]


def test_fleet_import_keeps_each_devices_phrases_lowercased_with_their_times(db, tmp_path) -> None:
    fleet = fleet_import(name="imported", path=write_jsonl(tmp_path, good_lines()), shard_size=2, now=NOW)
    shards = shard_columns("imported")
    phrases = [device for shard in shards for device in phrases_of(shard, fleet.vocabularies["tokens"])]
    assert phrases == [["hello world", "i went home"], ["hello"], [], [], ["world hello world"]]
    times = np.concatenate([shard["phrase_time"] for shard in shards])
    # A plain string and an object without a time are "now"; ISO times honour their offset.
    assert times.tolist() == [int(NOW), int(NOW) - 14_400, 1_714_000_000, int(NOW)]
    assert times.dtype == np.int64


def test_fleet_import_skips_blank_lines(db, tmp_path) -> None:
    lines = good_lines()
    fleet = fleet_import(name="imported", path=write_jsonl(tmp_path, [lines[0], "", "   ", *lines[1:]]), shard_size=10)
    assert fleet.size == 5


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ("{not json", "line 3: not valid JSON"),
        ('["d9"]', "line 3: must be a JSON object"),
        ('{"profile": {}}', "line 3: id: is required"),
        ('{"id": 9}', "line 3: id: must be a string"),
        ('{"id": "d1"}', "line 3: id: 'd1' is already the id of line 1"),
        ('{"id": "d9", "profile": {"age": "old"}}', "line 3: profile.age: must be a number"),
        ('{"id": "d9", "profile": {"age": true}}', "line 3: profile.age: must be a number"),
        ('{"id": "d9", "profile": {"age": -1}}', "line 3: profile.age: must be between 0 and 150"),
        ('{"id": "d9", "profile": {"locale": 7}}', "line 3: profile.locale: must be a non-empty string"),
        ('{"id": "d9", "profile": "adult"}', "line 3: profile: must be an object"),
        ('{"id": "d9", "profile": {"agee": 30}}', "line 3: profile.agee: unknown field"),
        ('{"id": "d9", "device": "phone"}', "line 3: device: unknown field"),
        ('{"id": "d9", "metrics": {"perplexity": 0.5}}', "line 3: metrics.perplexity: must be at least 1"),
        ('{"id": "d9", "keyboard": "hello"}', "line 3: keyboard: must be a list"),
        ('{"id": "d9", "keyboard": ["ok", 5]}', "line 3: keyboard[1]: must be a string"),
        ('{"id": "d9", "keyboard": ["  "]}', "line 3: keyboard[0]: must contain at least one word"),
        ('{"id": "d9", "keyboard": [{"time": 1}]}', "line 3: keyboard[0].text: must be a string"),
        ('{"id": "d9", "keyboard": [{"text": "a", "time": "yesterday"}]}', "line 3: keyboard[0].time: 'yesterday'"),
        (
            '{"id": "d9", "keyboard": [{"text": "a", "time": "2024-04-01"}]}',
            "line 3: keyboard[0].time: '2024-04-01' needs a UTC",
        ),
        ('{"id": "d9", "keyboard": [{"text": "a", "time": 1714521600000}]}', "line 3: keyboard[0].time: must be unix"),
        (
            '{"id": "d9", "keyboard": [{"text": "a", "time": 1800000000}]}',
            "line 3: keyboard[0].time: is after the import",
        ),
    ],
)
def test_fleet_import_names_the_line_and_field_of_a_bad_device_and_writes_nothing(
    db, tmp_path, bad_line: str, message: str
) -> None:
    lines = good_lines()
    path = write_jsonl(tmp_path, [lines[0], lines[1], bad_line, *lines[2:]])
    with pytest.raises(FleetInvalid) as raised:
        fleet_import(name="imported", path=path, shard_size=2, now=NOW)
    assert [error for error in raised.value.errors if error.startswith(message)], raised.value.errors
    assert len(raised.value.errors) == 1
    assert_nothing_written()


def test_fleet_import_reports_every_bad_line_at_once(db, tmp_path) -> None:
    lines = good_lines()
    path = write_jsonl(tmp_path, ['{"id": 1}', *lines, '{"id": "d2"}', "[]"])
    with pytest.raises(FleetInvalid) as raised:
        fleet_import(name="imported", path=path, shard_size=2, now=NOW)
    assert raised.value.errors == [
        "line 1: id: must be a string of 1 to 64 printable characters",
        "line 7: id: 'd2' is already the id of line 3",
        "line 8: must be a JSON object, one device per line",
    ]
    assert_nothing_written()


def test_fleet_import_refuses_a_file_without_devices(db, tmp_path) -> None:
    for content in ("", "\n  \n"):
        path = tmp_path / "empty.jsonl"
        path.write_text(content)
        with pytest.raises(FleetInvalid) as raised:
            fleet_import(name="imported", path=path, shard_size=2, now=NOW)
        assert raised.value.errors == [f"{path}: the file has no devices"]
    assert_nothing_written()


def test_fleet_import_refuses_a_missing_file(db, tmp_path) -> None:
    with pytest.raises(FleetInvalid) as raised:
        fleet_import(name="imported", path=tmp_path / "absent.jsonl", shard_size=2, now=NOW)
    assert "cannot read" in raised.value.errors[0]
    assert_nothing_written()


def test_fleet_import_refuses_a_name_that_exists_and_keeps_the_existing_fleet(db, tmp_path) -> None:
    fleet_import(name="imported", path=write_jsonl(tmp_path, good_lines()), shard_size=2, now=NOW)
    with pytest.raises(FleetInvalid) as raised:
        fleet_import(name="imported", path=write_jsonl(tmp_path, good_lines()[:1]), shard_size=2, now=NOW)
    assert raised.value.errors == ["name: a fleet named 'imported' already exists"]
    assert Fleet.objects.get().size == 5
    assert FleetShard.objects.count() == 3


# ---------------------------------------------------------------- synthetic


def test_fleet_create_gives_devices_ids_unique_across_shards(db) -> None:
    fleet_create(name="synthetic", size=2_500, seed=7, shard_size=1_000, now=NOW)
    ids = np.concatenate(fleet_columns("synthetic")["device_id"])
    assert ids.tolist() == [f"d{index}" for index in range(2_500)]


def test_fleet_create_is_deterministic_for_a_seed_and_a_time(db) -> None:
    fleet_create(name="first", size=2_500, seed=7, shard_size=1_000, now=NOW)
    fleet_create(name="second", size=2_500, seed=7, shard_size=1_000, now=NOW)
    assert [s.columns for s in FleetShard.objects.filter(fleet__name="first").order_by("index")] == [
        s.columns for s in FleetShard.objects.filter(fleet__name="second").order_by("index")
    ]


def test_fleet_create_at_another_time_only_shifts_the_phrase_times(db) -> None:
    fleet_create(name="first", size=1_500, seed=7, shard_size=1_000, now=NOW)
    fleet_create(name="later", size=1_500, seed=7, shard_size=1_000, now=NOW + 3_600)
    for first, later in zip(shard_columns("first"), shard_columns("later"), strict=True):
        for key in first:
            shift = 3_600 if key == "phrase_time" else 0
            np.testing.assert_array_equal(first[key] + shift if shift else first[key], later[key])


def test_fleet_create_stores_the_synthetic_vocabularies_and_the_seed(db) -> None:
    fleet = fleet_create(name="synthetic", size=10, seed=7, shard_size=4, now=NOW)
    assert (fleet.seed, fleet.size, fleet.vocabularies) == (7, 10, {"locale": LOCALES, "tokens": TOKENS})
    assert list(fleet.shards.order_by("index").values_list("size", flat=True)) == [4, 4, 2]


def test_fleet_create_reports_every_bad_argument_and_writes_nothing(db) -> None:
    with pytest.raises(FleetInvalid) as raised:
        fleet_create(name="bad name", size=0, seed=-1, shard_size=0, now=NOW)
    assert [error.split(":")[0] for error in raised.value.errors] == ["name", "size", "seed", "shard_size"]
    assert_nothing_written()


def test_fleet_create_refuses_a_name_that_exists(db) -> None:
    fleet_create(name="synthetic", size=10, seed=7, shard_size=4, now=NOW)
    with pytest.raises(FleetInvalid) as raised:
        fleet_create(name="synthetic", size=10, seed=8, shard_size=4, now=NOW)
    assert raised.value.errors == ["name: a fleet named 'synthetic' already exists"]
    assert Fleet.objects.get().seed == 7


def test_generate_shard_times_lie_in_the_history_window_oldest_first() -> None:
    columns = generate_shard(2_000, np.random.default_rng(3), now=NOW)
    times = columns["phrase_time"]
    assert times.size == columns["token_start"].size - 1
    assert times.min() > NOW - HISTORY_DAYS * 86_400
    assert times.max() <= NOW
    within_device = np.diff(times)[np.diff(np.repeat(np.arange(2_000), np.diff(columns["phrase_start"]))) == 0]
    assert (within_device >= 0).all()


def test_generate_shard_columns_survive_npz_without_pickle() -> None:
    columns = generate_shard(50, np.random.default_rng(3), first_index=99_990, now=NOW)
    loaded = unpack(pack(columns))
    assert loaded["device_id"].dtype.kind == "U"
    assert loaded["device_id"][[0, -1]].tolist() == ["d99990", "d100039"]
    assert {key: value.dtype for key, value in loaded.items()} == {key: value.dtype for key, value in columns.items()}


# ---------------------------------------------------------------- manage.py fleet


def test_fleet_command_creates_imports_and_lists_fleets(db, tmp_path) -> None:
    out = io.StringIO()
    call_command(
        "fleet", "create", "--name", "synthetic", "--size", "25", "--seed", "4", "--shard-size", "10", stdout=out
    )
    path = write_jsonl(tmp_path, good_lines())
    call_command("fleet", "import", str(path), "--name", "imported", "--shard-size", "2", stdout=out)
    call_command("fleet", "list", stdout=out)
    assert out.getvalue().splitlines() == [
        "created fleet synthetic: 25 devices in 3 shards (seed 4)",
        f"created fleet imported: 5 devices in 3 shards ({path})",
        "name       devices  shards  source",
        "imported   5        3       imported",
        "synthetic  25       3       seed 4",
    ]


def test_fleet_command_create_with_the_same_seed_and_now_gives_the_same_columns(db) -> None:
    for name in ("first", "second"):
        call_command("fleet", "create", "--name", name, "--size", "30", "--seed", "4", "--shard-size", "10",
                     "--now", "2024-05-01T00:00:00Z", stdout=io.StringIO())  # fmt: skip
    first, second = Fleet.objects.get(name="first"), Fleet.objects.get(name="second")
    assert [s.columns for s in first.shards.order_by("index")] == [s.columns for s in second.shards.order_by("index")]


def test_fleet_command_without_a_seed_picks_one_and_records_it(db) -> None:
    out = io.StringIO()
    call_command("fleet", "create", "--name", "synthetic", "--size", "5", stdout=out)
    assert out.getvalue().strip().endswith(f"(seed {Fleet.objects.get().seed})")


def test_fleet_command_import_of_a_bad_file_exits_2_with_every_message(db, tmp_path) -> None:
    lines = good_lines()
    path = write_jsonl(tmp_path, [lines[0], '{"id": "d9", "profile": {"age": "old"}}', '{"id": "d1"}'])
    with pytest.raises(CommandError) as raised:
        call_command("fleet", "import", str(path), "--name", "imported")
    assert raised.value.returncode == 2
    assert "line 2: profile.age: must be a number" in str(raised.value)
    assert "line 3: id: 'd1' is already the id of line 1" in str(raised.value)
    assert_nothing_written()


def test_fleet_command_create_with_bad_arguments_exits_2(db) -> None:
    with pytest.raises(CommandError) as raised:
        call_command("fleet", "create", "--name", "synthetic", "--size", "0", "--shard-size", "0")
    assert raised.value.returncode == 2
    assert "size: must be an integer" in str(raised.value)
    assert "shard_size: must be an integer" in str(raised.value)
    assert_nothing_written()


def test_fleet_command_refuses_a_bad_now_with_exit_2(db) -> None:
    with pytest.raises(CommandError) as raised:
        call_command("fleet", "create", "--name", "synthetic", "--size", "5", "--now", "2024-05-01")
    assert raised.value.returncode == 2
    assert "now: '2024-05-01' needs a UTC offset" in str(raised.value)
    assert_nothing_written()
