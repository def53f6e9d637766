"""Each setting has one owner: flags and node parameters take default, choices and range
from the owner's field."""

import argparse
import dataclasses

import pytest

from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.engine.dtype_choice import DTYPE_CHOICES
from flashdrive_ros.eval.replay_options import ReplayOptions
from flashdrive_ros.model.config import ConfigError
from flashdrive_ros.ros.params import DriveParams, ParameterError
from flashdrive_ros.settings import (
    add_setting_argument,
    derived,
    field_problems,
    setting,
    value_problem,
)


@dataclasses.dataclass
class Owner:
    count: int = setting(2, "how many (100 %)", minimum=1, maximum=9)
    kind: str = setting("a", "which kind", choices=("a", "b"))
    limit: int | None = setting(None, "optional limit", minimum=1)


@dataclasses.dataclass
class Above:
    count: int = derived(Owner, "count", default=5, also="Per window.")
    kind: str = derived(Owner, "kind", choices=("a", "b", "c"))


def test_derived_field_keeps_the_owner_rules_unless_changed():
    count = {f.name: f for f in dataclasses.fields(Above)}["count"]
    assert Above().count == 5 and count.metadata["minimum"] == 1
    assert count.metadata["description"] == "how many (100 %) Per window."
    assert field_problems(Above(count=0)) == ["count must be >= 1, got 0"]
    assert field_problems(Above(kind="c")) == []
    assert field_problems(Owner(kind="c")) == ["kind must be one of ('a', 'b'), got 'c'"]
    assert field_problems(Owner(limit=None)) == []
    assert value_problem("--count", float("nan"), {"minimum": 1}) == \
        "--count must be finite, got nan"


def test_flag_from_a_field():
    p = argparse.ArgumentParser()
    add_setting_argument(p, Owner, "count")
    add_setting_argument(p, Owner, "kind", flag="--sort")
    add_setting_argument(p, Owner, "limit", type=int)
    assert vars(p.parse_args([])) == {"count": 2, "sort": "a", "limit": None}
    assert vars(p.parse_args(["--count", "3", "--limit", "4"]))["limit"] == 4
    with pytest.raises(SystemExit):
        p.parse_args(["--sort", "c"])
    assert "100 %" in p.format_help()


def test_engine_settings_have_one_owner():
    owner = {f.name: f for f in dataclasses.fields(EngineConfig)}
    node = {f.name: f for f in dataclasses.fields(DriveParams)}
    replay = {f.name: f for f in dataclasses.fields(ReplayOptions)}
    assert node["num_samples"].metadata["minimum"] == owner["num_samples"].metadata["minimum"]
    for name in ("mode", "backend"):
        assert node[name].metadata["choices"] == owner[name].metadata["choices"]
    assert replay["backend"].metadata["choices"] == owner["backend"].metadata["choices"]
    assert DTYPE_CHOICES == ("auto", *owner["dtype"].metadata["choices"])
    assert node["dtype"].metadata["choices"] == replay["dtype"].metadata["choices"]
    assert DriveParams().drafter_file == EngineConfig().drafter_file
    with pytest.raises(ConfigError, match="num_samples must be >= 1"):
        EngineConfig(num_samples=0)
    with pytest.raises(ParameterError, match="num_samples"):
        DriveParams(num_samples=0)


def test_switches_where_they_apply_and_the_reported_coc_reuse_adjustment():
    on = dict.fromkeys(("streaming", "speculative", "cuda_graphs", "coc_reuse"), True)
    cpu = EngineConfig.where_applicable(on, device="cpu")
    assert not cpu.cuda_graphs and cpu.coc_reuse and cpu.adjustments == []
    no_spec = EngineConfig.where_applicable({**on, "speculative": False}, device="cpu")
    assert not no_spec.coc_reuse and "coc_reuse off" in no_spec.adjustments[0]
    baseline = EngineConfig.where_applicable(on, mode="baseline")
    assert not (baseline.streaming or baseline.coc_reuse) and baseline.adjustments == []
