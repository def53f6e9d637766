import json

import pytest
import torch

from flashdrive_ros.model.config import ModelConfig
from flashdrive_ros.model.drafter_file import load_drafter
from flashdrive_ros.model.eagle_drafter import EagleDrafter
from flashdrive_ros.paths import default_model_dir
from flashdrive_ros.train.drafter_study import main

NAMES = ("flat", "mrope", "eagle", "rl_static", "rl_policy")


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("drafter_study")
    threads = torch.get_num_threads()
    try:
        code = main(["--model-dir", str(default_model_dir()), "--out", str(out), "--smoke",
                     "--device", "cpu"])
    finally:
        torch.set_num_threads(threads)
    return out, code


def test_smoke_runs_every_stage_and_writes_every_drafter(smoke_run):
    out, code = smoke_run
    study = json.loads((out / "study.json").read_text())
    assert code == 0 and study["errors"] == []
    text = ModelConfig.load(default_model_dir() / "config.json").text
    for name in NAMES:
        drafter = load_drafter(out / f"drafter_{name}.safetensors", text, None)
        entry = study["drafters"][name]
        assert (drafter.cfg.kind, drafter.cfg.rotary) == (entry["kind"], entry["rotary"])
        assert drafter.cfg.context_len == study["context_len"] > study["prompt_len"]
        assert set(entry["offline"]) == {"8", "16"}
    assert isinstance(load_drafter(out / "drafter_eagle.safetensors", text, None), EagleDrafter)
    assert study["drafters"]["mrope"]["rotary"] == "mrope"
    assert study["rl"]["rl_static"]["anchor"] == "static"
    assert study["rl"]["rl_policy"]["anchor"] == "policy"
    assert study["rl_base"] in ("flat", "mrope", "eagle")
    assert study["rl_seeds"] == [study["train_seeds"][-1] + 1]
    assert study["corpus_rl_rows"] > 0
    for anchor in ("rl_static", "rl_policy"):
        rl = study["rl"][anchor]
        assert rl["updates"] >= 1 and rl["updates"] + rl["skipped"] == rl["steps"]
    assert (out / "study.md").read_text().count("| drafter |") == 3


def test_smoke_measures_inside_the_engine_losslessly(smoke_run):
    out, _ = smoke_run
    study = json.loads((out / "study.json").read_text())
    settings = {(r["drafter"], r["block_size"], r["streaming"]) for r in study["engine"]}
    for name in (*NAMES, "shipped"):
        assert {(name, 8, False), (name, 16, False)} <= settings
    for name in ("flat", "mrope", "eagle"):
        assert (name, 8, True) in settings
    for r in study["engine"]:
        assert r["windows"] >= (2 if r["streaming"] else 1)
        assert r["accepted_length"] >= 1.0 and r["draft_ms"] > 0 and r["verify_ms"] > 0
        assert r["speedup"] == pytest.approx(r["accepted_length"] / (1 + r["cost_ratio"]))
        assert r["full_prefills"] == (1 if r["streaming"] else r["windows"])
    assert study["same_cocs"] == {"full prefill": True, "streaming": True}


def test_smoke_attention_budget_reaches_images_and_history(smoke_run):
    out, _ = smoke_run
    budget = json.loads((out / "study.json").read_text())["attention_budget"]
    for name in ("flat", "mrope", "shipped"):
        assert sum(budget[name].values()) == pytest.approx(1.0, abs=1e-4)
    for name in ("flat", "mrope"):
        assert budget[name]["vision"] > 0 and budget[name]["history"] > 0

