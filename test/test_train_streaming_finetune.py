import json

import pytest
import torch
from helpers.tiny_model import make_sim_sized_model_dir
from safetensors import safe_open

from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.manifest import sha256_of, verify_manifest
from flashdrive_ros.train.finetune_recipe import FinetuneRecipe
from flashdrive_ros.train.log import read_log
from flashdrive_ros.train.streaming_finetune import main


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    source = make_sim_sized_model_dir(tmp_path_factory.mktemp("before"))
    hashes = {p.name: sha256_of(p) for p in source.iterdir()}
    out = tmp_path_factory.mktemp("stream")
    assert main(["--model-dir", str(source), "--out", str(out), "--smoke", "--device", "cpu",
                 "--workers", "1"]) == 0
    return source, hashes, out


def test_smoke_writes_a_loadable_after_model_and_keeps_the_before(smoke_run):
    source, hashes, out = smoke_run
    assert {p.name: sha256_of(p) for p in source.iterdir()} == hashes
    for name in ("model", "backbone_model"):
        assert verify_manifest(out / name, required=True)
        assert (out / name / "drafter.safetensors").read_bytes() == \
            (source / "drafter.safetensors").read_bytes()
    before = AlpamayoModel.from_dir(source)
    after = AlpamayoModel.from_dir(out / "model")
    assert after.cfg.to_dict() == before.cfg.to_dict()
    weights = "vlm.model.language_model.layers.0.self_attn.k_proj.weight"
    with safe_open(out / "model" / "model.safetensors", "pt") as stored:
        assert stored.get_tensor(weights).dtype == torch.float16
    assert not torch.equal(after.state_dict()[weights], before.state_dict()[weights])


def test_smoke_evaluates_every_model_in_both_prefills_and_logs_both_stages(smoke_run):
    _, _, out = smoke_run
    report = json.loads((out / "eval.json").read_text())
    assert list(report["results"]) == ["before", "backbone stage", "after"]
    for blocks in report["results"].values():
        assert list(blocks) == ["full prefill", "streaming"]
        for block in blocks.values():
            assert block["windows"] == 2 and block["minade6_6s"] is not None
    assert set(report["streaming_minus_full"]) == set(report["results"])
    table = (out / "eval.md").read_text()
    assert table.count("| after |") == 3 and "Streaming minus full prefill" in table
    summary = json.loads((out / "summary.json").read_text())
    assert summary["backbone"]["steps"] == 2
    assert summary["backbone"]["streaming_sequences"] == 4
    assert summary["expert"]["steps"] == 1
    stages = {record["stage"] for record in read_log(out / "train_log.jsonl")}
    assert {"data", "eval", "stream_backbone", "stream_backbone_eval", "streaming",
            "streaming_eval", "done"} <= stages


def test_recipe_is_validated():
    with pytest.raises(ValueError, match="expert_share"):
        FinetuneRecipe(expert_share=1.0)
    with pytest.raises(ValueError, match="train_drives"):
        FinetuneRecipe(train_drives=0)
