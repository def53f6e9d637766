import pytest
import torch

from flashdrive_ros.bench.profile import main, parse_args
from flashdrive_ros.bench.shapes import shape_config
from flashdrive_ros.engine.config import EngineConfig


def test_profile_prints_stages_and_kernels_per_variant(capsys):
    assert main(["--shape", "tiny", "--windows", "1", "--warmup", "0", "--coc-tokens", "2",
                 "--top", "3", "--rotated-keys", "on,off"]) == 0
    out = capsys.readouterr().out
    assert out.count("tiny flashdrive stage all cuda_graphs=False") == 2
    assert "rotated_keys=True" in out and "rotated_keys=False" in out
    for stage in ("encode", "prefill", "decode", "action"):
        assert f"stage:{stage}" in out
    assert "Self CPU time total" in out


def test_action_stage_profiles_only_the_action_expert(capsys):
    assert main(["--shape", "tiny", "--windows", "2", "--warmup", "0", "--coc-tokens", "2",
                 "--top", "1000", "--stage", "action"]) == 0
    out = capsys.readouterr().out
    assert "tiny flashdrive stage action cuda_graphs=False" in out
    stages = {line.split()[0] for line in out.splitlines() if line.strip().startswith("stage:")}
    assert stages == {"stage:action"}
    table_row = [line.split() for line in out.splitlines()
                 if line.strip().startswith("stage:action") and "%" in line]
    assert len(table_row) == 1 and table_row[0][-1] == "2"
    assert "aten::" in out


def test_action_stage_shows_the_prefix_copies_the_staged_prefix_saves(capsys):
    assert main(["--shape", "tiny", "--windows", "1", "--warmup", "0", "--coc-tokens", "2",
                 "--top", "1000", "--stage", "action", "--staged-prefix", "on,off"]) == 0
    out = capsys.readouterr().out
    cats = {}
    for section in out.split("\ntiny flashdrive stage action")[1:]:
        staged = "staged_prefix=True" in section.splitlines()[0]
        rows = [line.split() for line in section.splitlines()
                if line.strip().startswith("aten::cat ")]
        cats[staged] = int(rows[0][-1])
    layers = shape_config("tiny").expert.num_hidden_layers
    schedule = EngineConfig().flow_schedule
    velocity_calls = schedule.num_steps - len(schedule.reuse_steps)
    assert cats[False] - cats[True] == 2 * layers * velocity_calls  # the keys' and values'


def test_switch_values_are_checked():
    assert parse_args(["--graphs", "on,off"]).graphs == ["on", "off"]
    with pytest.raises(SystemExit):
        parse_args(["--graphs", "maybe"])
    assert parse_args(["--action-attention", "masked,flex"]).action_attention == [
        "masked", "flex"]
    with pytest.raises(SystemExit):
        parse_args(["--action-attention", "dense"])


def test_combinations_the_engine_refuses_are_skipped_with_the_reason(capsys):
    assert main(["--shape", "tiny", "--windows", "1", "--warmup", "0", "--coc-tokens", "2",
                 "--top", "3", "--stage", "action", "--action-attention", "masked,flex",
                 "--compiled-expert", "off,on", "--compiled-backbone", "off,on"]) == 0
    out = capsys.readouterr().out
    assert out.count("tiny flashdrive stage action") == 1
    assert "action_attention=masked compiled_expert=False compiled_backbone=False" in out
    skipped = "skipped graphs/rotated/staged/attention/compiled expert/compiled backbone"
    assert f"{skipped} off/on/on/flex/off/off" in out
    assert "set cuda_graphs and staged_prefix true" in out
    assert f"{skipped} off/on/on/masked/on/off" in out
    assert f"{skipped} off/on/on/masked/off/on" in out
    assert "compiled_backbone false" in out


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_action_stage_keeps_the_cuda_kernels(capsys):
    assert main(["--shape", "tiny", "--device", "cuda", "--windows", "2", "--warmup", "1",
                 "--coc-tokens", "2", "--top", "5", "--stage", "action", "--graphs", "off"]) == 0
    out = capsys.readouterr().out
    assert "Self CUDA time total" in out
