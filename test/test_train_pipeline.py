import dataclasses
import json
import shutil

import pytest
import torch

from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.config import ModelConfig
from flashdrive_ros.model.drafter import Drafter
from flashdrive_ros.model.drafter_weights import read_drafter_file, save_drafter_tensors
from flashdrive_ros.model.manifest import sha256_of, write_manifest
from flashdrive_ros.model.tokenizer import TextTokenizer
from flashdrive_ros.paths import default_model_dir
from flashdrive_ros.sim.seeds import train_seeds
from flashdrive_ros.train.log import TrainLog, read_log
from flashdrive_ros.train.pipeline import main, parse_args
from flashdrive_ros.train.recipe import Recipe, smoke
from flashdrive_ros.train.run_data import fresh_data
from flashdrive_ros.train.warm_start import warm_start


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("smoke")
    assert main(["--out", str(out), "--smoke", "--device", "cpu", "--workers", "2"]) == 0
    return out


def test_smoke_writes_a_loadable_model_directory(smoke_run):
    model_dir = smoke_run / "model"
    model = AlpamayoModel.from_dir(model_dir)
    tokenizer = TextTokenizer.from_file(model_dir / "tokenizer.json")
    assert tokenizer.vocab_size == model.cfg.text.vocab_size
    assert model.cfg.drafter.rotary == "flat"
    for name, rotary in (("drafter.safetensors", "flat"), ("drafter_mrope.safetensors", "mrope")):
        cfg = model.cfg.drafter.__class__(**{**model.cfg.drafter.__dict__, "rotary": rotary})
        Drafter(cfg, model.cfg.text).load_safetensors(model_dir / name)
    a = model.cfg.action
    assert a.accel_std != 1.0 and a.curvature_std != 1.0
    assert torch.isclose(model.action_space.accel_std, torch.tensor(a.accel_std))


def test_smoke_losses_decrease_and_are_logged(smoke_run):
    summary = json.loads((smoke_run / "summary.json").read_text())
    target = summary["target"]
    assert target["final_coc_loss"] < target["first_coc_loss"]
    assert target["eval_flow_loss"] < target["first_flow_loss"]
    for rotary in ("flat", "mrope"):
        drafter = summary[f"drafter_{rotary}"]
        assert drafter["final_loss"] < drafter["first_loss"]
        assert drafter["eval_accept_len"] >= 1.0
    assert summary["streaming"]["steps"] >= 1
    assert summary["streaming_backbone"]["steps"] >= 1
    stages = {record["stage"] for record in read_log(smoke_run / "train_log.jsonl")}
    assert {"data", "coverage", "tokenizer", "target", "target_eval", "stream_backbone_eval",
            "drafter_flat", "drafter_mrope", "streaming", "done"} <= stages
    assert summary["train_seeds"][1] < summary["eval_seeds"][0]


def test_smoke_writes_the_coverage_of_its_training_windows(smoke_run):
    summary = json.loads((smoke_run / "summary.json").read_text())
    table = summary["coverage"]
    assert table["windows"] == summary["train_windows"]
    assert sum(row["windows"] for row in table["decision"].values()) == table["windows"]
    assert sum(row["windows"] for row in table["speed_band"].values()) == table["windows"]
    assert "| decision |" in (smoke_run / "coverage.md").read_text()


def test_smoke_records_the_decision_focus_and_the_decision_accuracy(smoke_run):
    summary = json.loads((smoke_run / "summary.json").read_text())
    focus = summary["decision_focus"]
    assert focus["token_weight"] == 5.0 and focus["balance"] == 0.0
    assert sum(focus["drawn_share"].values()) == pytest.approx(1.0, abs=1e-3)
    assert 0.0 <= focus["start_from_rest_share"] <= 1.0 and focus["start_weight"] == 1.0
    assert focus["decisive_tokens_mean"] >= 1.0
    assert focus["side_weight"] == 1.0 and 0.0 <= focus["side_word_windows_share"] <= 1.0
    target = summary["target"]
    assert 0.0 <= target["eval_decision_acc"] <= 1.0
    assert 0.0 <= target["final_decision_acc"] <= 1.0
    assert any(k.startswith("eval_decision_acc_") for k in target)


@pytest.fixture(scope="module")
def warm_init(smoke_run, tmp_path_factory):
    """The smoke model with its drafters stored at a block size other than config.json's
    (as the shipped model runs its drafter at block 16 over a config of block 8)."""
    init = tmp_path_factory.mktemp("init") / "model"
    shutil.copytree(smoke_run / "model", init)
    (init / "manifest.json").unlink()
    for name in ("drafter.safetensors", "drafter_mrope.safetensors"):
        tensors, cfg = read_drafter_file(init / name)
        save_drafter_tensors(tensors, dataclasses.replace(cfg, block_size=cfg.block_size + 4),
                             init / name)
    write_manifest(init)
    return init


@pytest.fixture(scope="module")
def warm_run(warm_init, tmp_path_factory):
    out = tmp_path_factory.mktemp("warm")
    assert main(["--out", str(out), "--smoke", "--device", "cpu", "--workers", "2",
                 "--init-from", str(warm_init), "--target-lr", "1e-3"]) == 0
    return out


def test_a_warm_start_keeps_the_tokenizer_and_action_normalization_of_its_model(warm_init,
                                                                                 warm_run):
    cold, warm = warm_init, warm_run / "model"
    assert (TextTokenizer.from_file(warm / "tokenizer.json").tokenizer.get_vocab()
            == TextTokenizer.from_file(cold / "tokenizer.json").tokenizer.get_vocab())
    cold_cfg, warm_cfg = ModelConfig.load(cold / "config.json"), ModelConfig.load(
        warm / "config.json")
    assert warm_cfg.to_dict() == cold_cfg.to_dict()
    summary = json.loads((warm_run / "summary.json").read_text())
    assert summary["init_from"]["path"] == str(cold)
    assert summary["init_from"]["weights_sha256"] == sha256_of(cold / "model.safetensors")
    assert summary["init_from"]["drafter_flat"] and summary["init_from"]["drafter_mrope"]
    for name in ("drafter.safetensors", "drafter_mrope.safetensors"):
        assert read_drafter_file(warm / name)[1] == read_drafter_file(cold / name)[1]


def test_the_shipped_model_is_a_warm_start_of_the_recipe():
    warm = warm_start(Recipe(init_from=str(default_model_dir())))
    model = AlpamayoModel(warm.cfg)
    warm.load_model(model)
    for rotary in ("flat", "mrope"):
        cfg = warm.drafter_config(dataclasses.replace(warm.cfg.drafter, rotary=rotary))
        assert cfg.rotary == rotary
        assert warm.load_drafter(Drafter(cfg, warm.cfg.text))


def test_a_warm_start_begins_where_its_model_ended(smoke_run, warm_run):
    cold = json.loads((smoke_run / "summary.json").read_text())
    warm = json.loads((warm_run / "summary.json").read_text())
    assert warm["target"]["first_coc_loss"] < 0.8 * cold["target"]["first_coc_loss"]
    for rotary in ("flat", "mrope"):
        assert (warm[f"drafter_{rotary}"]["first_loss"]
                < cold[f"drafter_{rotary}"]["first_loss"])


def test_a_warm_start_from_another_model_stops_with_the_difference(smoke_run, tmp_path,
                                                                    capsys):
    other = tmp_path / "other"
    shutil.copytree(smoke_run / "model", other)
    cfg = json.loads((other / "config.json").read_text())
    cfg["text"]["intermediate_size"] += 8
    (other / "config.json").write_text(json.dumps(cfg))
    assert main(["--out", str(tmp_path / "run"), "--smoke", "--device", "cpu",
                 "--init-from", str(other)]) == 2
    assert "differs in ['text']" in capsys.readouterr().err
    assert main(["--out", str(tmp_path / "run"), "--smoke", "--device", "cpu",
                 "--init-from", str(tmp_path / "absent")]) == 2
    assert "has no config.json" in capsys.readouterr().err


def test_training_drives_start_at_the_seed_offset(tmp_path):
    recipe = dataclasses.replace(smoke(), train_seed_offset=5)
    log = TrainLog(tmp_path / "log.jsonl", echo=False)
    _, train, _, summary = fresh_data(tmp_path, recipe, 1, log, 0.0, None)
    assert [d.seed for d in train] == train_seeds(2, 5) == [5, 6]
    assert summary["train_seeds"] == [5, 6]
    assert summary["light_branch_drives"] == 0
    assert summary["light_branches"] == dataclasses.asdict(recipe.light_branches)
    with pytest.raises(ValueError, match="train_seed_offset"):
        dataclasses.replace(smoke(), train_seed_offset=-1)


def test_the_command_line_sets_the_recipe():
    _, recipe = parse_args(["--out", "o", "--init-from", "models/default", "--target-lr",
                            "3e-4", "--target-batch", "96", "--train-seed-offset", "56",
                            "--train-drives", "32"])
    assert (recipe.init_from, recipe.target_lr, recipe.target_batch, recipe.train_seed_offset,
            recipe.train_drives) == ("models/default", 3e-4, 96, 56, 32)
    assert parse_args(["--out", "o"])[1] == Recipe()
    _, recipe = parse_args(["--out", "o", "--early-greens", "3", "--held-red", "off",
                            "--natural-wait", "on"])
    branches = recipe.light_branches
    assert (branches.early_greens, branches.held_red, branches.natural_wait) == (3, False, True)
    assert not parse_args(["--out", "o"])[1].light_branches.enabled
    assert parse_args(["--out", "o", "--held-red", "on"])[1].light_branches.held_red
    assert parse_args(["--out", "o", "--stand-back", "on"])[1].light_branches.stand_back
    branches = parse_args(["--out", "o", "--stand-back", "on", "--stand-back-release",
                           "red"])[1].light_branches
    assert (branches.stand_back, branches.stand_back_release) == (True, "red")
    disturbance = parse_args(["--out", "o", "--lead-lag-share", "0.6"])[1].disturbance
    assert disturbance == dataclasses.replace(Recipe().disturbance, lead_lag_share=0.6)
    assert not Recipe().lead_stops.enabled
    assert parse_args(["--out", "o", "--lead-stops", "2"])[1].lead_stops.per_drive == 2
    assert not Recipe().lane_forks.enabled
    assert parse_args(["--out", "o", "--lane-forks", "3"])[1].lane_forks.per_drive == 3
    assert not Recipe().lamp_pairs.enabled
    assert parse_args(["--out", "o", "--lamp-pairs", "4"])[1].lamp_pairs.per_wait == 4
    assert not Recipe().standing_lead_label
    assert parse_args(["--out", "o", "--standing-lead-label", "on"])[1].standing_lead_label
    assert Recipe().history_dropout == 0.0
    assert parse_args(["--out", "o", "--history-dropout", "0.3"])[1].history_dropout == 0.3
    for bad in (["--target-batch", "0"], ["--train-seed-offset", "-1"],
                ["--early-greens", "-1"], ["--held-red", "maybe"], ["--lead-lag-share", "2"],
                ["--stand-back-release", "amber"], ["--lead-stops", "-1"],
                ["--history-dropout", "1"], ["--lamp-pairs", "-1"], ["--lane-forks", "-1"]):
        with pytest.raises(SystemExit):
            parse_args(["--out", "o", *bad])
