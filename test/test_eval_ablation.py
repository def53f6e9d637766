"""Every engine variant on the same held-out windows (eval/ablation.py), on a tiny model."""

import dataclasses

import pytest

from flashdrive_ros.eval import ablation
from flashdrive_ros.model.config import ModelConfig
from flashdrive_ros.model.drafter import Drafter
from flashdrive_ros.model.drafter_name import MROPE_DRAFTER_FILE
from flashdrive_ros.model.manifest import write_manifest
from helpers.tiny_model import make_sim_sized_model_dir


@pytest.fixture(scope="module")
def blocks(tmp_path_factory) -> dict:
    model_dir = make_sim_sized_model_dir(tmp_path_factory.mktemp("model"))
    cfg = ModelConfig.load(model_dir / "config.json")
    mrope = Drafter(dataclasses.replace(cfg.drafter, rotary="mrope"), cfg.text).eval()
    mrope.save_safetensors(model_dir / MROPE_DRAFTER_FILE)
    write_manifest(model_dir)
    blocks = ablation.run(model_dir, tmp_path_factory.mktemp("ablation"), drives=1,
                          seconds=10.0, num_samples=1)
    ablation.add_same_coc(blocks)
    return blocks


def test_every_variant_plans_the_same_windows(blocks):
    assert list(blocks) == list(ablation.VARIANTS)
    windows = {name: [row["t0"] for row in block["per_window"]] for name, block in blocks.items()}
    assert len(set(map(tuple, windows.values()))) == 1
    assert blocks["flashdrive"]["windows"] == len(windows["flashdrive"]) > 0


def test_same_coc_share_against_flashdrive_and_lossless_speculation(blocks):
    assert blocks["flashdrive"]["same_coc_as_flashdrive"] == 1.0
    fp8 = blocks["flashdrive, FP8 backbone weights"]["same_coc_as_flashdrive"]
    assert 0.0 <= fp8 <= 1.0
    assert ablation.same_coc_share(blocks["flashdrive, full prefill"], blocks["baseline"]) == 1.0
    assert ablation.same_coc_share(blocks["flashdrive, drafter only (no CoC reuse)"],
                                   blocks["flashdrive"]) == 1.0


def test_same_coc_share_pairs_windows_by_time():
    block = {"per_window": [{"t0": 1.0, "coc": "a"}, {"t0": 2.0, "coc": "b"}]}
    other = {"per_window": [{"t0": 2.0, "coc": "b"}, {"t0": 1.0, "coc": "x"},
                            {"t0": 3.0, "coc": "c"}]}
    assert ablation.same_coc_share(block, other) == 0.5
    assert ablation.same_coc_share(block, {"per_window": []}) is None


def test_same_coc_share_keeps_drives_on_one_clock_apart():
    two_drives = {"per_window": [{"t0": 1.0, "coc": "a"}, {"t0": 2.0, "coc": "b"},
                                 {"t0": 1.0, "coc": "c"}, {"t0": 2.0, "coc": "d"}]}
    other = {"per_window": [{"t0": 1.0, "coc": "a"}, {"t0": 2.0, "coc": "b"},
                            {"t0": 1.0, "coc": "x"}, {"t0": 2.0, "coc": "d"}]}
    assert ablation.same_coc_share(two_drives, other) == 0.75


def test_table_has_a_row_per_variant_with_the_same_coc_column(blocks):
    lines = ablation.table(blocks).splitlines()
    assert "same CoC as flashdrive" in lines[0]
    assert [line.split(" | ")[0].lstrip("| ") for line in lines[2:]] == list(ablation.VARIANTS)
