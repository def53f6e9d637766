import importlib.util
import json

import pytest
import torch

from flashdrive_ros.bench.cli import main
from flashdrive_ros.bench.variants import ALL_PRE_ROPE, ar_counterpart, variant_overrides
from flashdrive_ros.engine.types import STAGES

AT_L = ("flashdrive_at_5.6_block8", "flashdrive_at_11.5_block16")
ENGINE_VARIANTS = ("baseline", "streaming", "speculative", "cached_velocity", "flashdrive",
                   "flashdrive_prerope_keys", "flashdrive_fp8", *AT_L)
SAMPLES = ("1", "6")


@pytest.fixture(scope="module", autouse=True)
def restore_threads():
    previous = torch.get_num_threads()
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    main(["--shape", "tiny", "--device", "cpu", "--out", str(out), "--windows", "3",
          "--warmup", "1", "--threads", "1"])
    return json.loads((out / "bench.json").read_text())


def test_bench_json_is_complete(run):
    assert run["complete"] is True
    assert run["settings"]["shape"] == "tiny" and run["dtype"] == "float32"
    assert run["machine"]["torch"] == torch.__version__ and run["machine"]["date"]
    assert run["command"].startswith("flashdrive-bench --shape tiny --device cpu")
    assert run["floors"]["copy_bytes_per_s"] > 0 and run["floors"]["matmul_flops_per_s"] > 0
    assert set(run["variants"]) == {"reference", *ENGINE_VARIANTS}
    assert "cuda_graphs" in run["skipped"] and "flashdrive_plain_logits" in run["skipped"]
    assert "set cuda_graphs true" in run["skipped"]["flashdrive_flex"]
    assert "set cuda_graphs true" in run["skipped"]["flashdrive_compiled_expert"]
    assert "set cuda_graphs true" in run["skipped"]["flashdrive_compiled"]
    order = list(run["variants"])
    assert order[:5] == ["flashdrive", *AT_L, "flashdrive_fp8", "reference"]


def test_decode_is_measured_at_the_pattern_accepted_length(run):
    for name, block, length in ((AT_L[0], 8, 5.6), (AT_L[1], 16, 11.5)):
        for count in SAMPLES:
            m = run["measured_acceptance"][name][count]
            assert m["block_size"] == block and m["target_accepted_length"] == length
            assert m["rounds_mean"] == m["pattern_rounds"] and m["same_coc_as_recorded"] == 1
            result = run["variants"][name]["samples"][count]
            assert result["work"]["rounds"] == m["pattern_rounds"]
            assert m["decode_ms"] == result["stages"]["decode"]["p50"]
    assert run["measured_acceptance"][AT_L[0]]["1"]["pattern_rounds"] == 3


def test_every_measured_variant_has_a_thor_projection(run):
    assert run["thor"]["floors"]["copy_bytes_per_s"] == pytest.approx(273e9)
    for name, variant in run["variants"].items():
        projected = variant["samples"]["1"]["thor_projected_ms"]
        assert all(projected[stage] > 0 for stage in STAGES), name
        assert projected["total"] == pytest.approx(
            sum(projected[s] for s in STAGES if s != "total"))


@pytest.mark.parametrize("variant", ["reference", *ENGINE_VARIANTS])
def test_every_variant_has_every_stage_and_sample_count(run, variant):
    entry = run["variants"][variant]
    assert "error" not in entry
    assert set(entry["samples"]) == set(SAMPLES)
    for count in SAMPLES:
        result = entry["samples"][count]
        assert result["work"]["samples"] == int(count)
        for stage in STAGES:
            stats = result["stages"][stage]
            assert 0 < stats["min"] <= stats["p50"] <= stats["p90"] <= stats["max"]
            assert result["floors"][stage]["floor_ms"] > 0
            assert result["over_floor"][stage] == pytest.approx(
                stats["p50"] / result["floors"][stage]["floor_ms"])
            ratio = run["speedups"]["vs_reference"][variant][count][stage]
            ref = run["variants"]["reference"]["samples"][count]["stages"][stage]["p50"]
            assert ratio == pytest.approx(ref / stats["p50"])


def test_engine_variants_decode_the_forced_coc_and_stream(run):
    for variant in ENGINE_VARIANTS:
        result = run["variants"][variant]["samples"]["1"]
        assert result["coc_tokens"]["min"] == result["coc_tokens"]["max"] == 16
        streaming = result["engine_config"]["streaming"]
        assert result["full_prefills"] == (0 if streaming else result["windows"])
        assert result["work"]["images"] == (4 if streaming else 16)
    reference = run["variants"]["reference"]["samples"]["1"]
    assert reference["generate_new_tokens"] == 19 and reference["flow_steps"] == 10


def test_decode_section_pairs_speculative_with_autoregressive(run):
    assert set(run["decode"]) == {"speculative", "flashdrive", "flashdrive_prerope_keys"}
    assert "flashdrive_fp8" not in run["decode"]
    d = run["decode"]["speculative"]
    assert d["autoregressive_variant"] == "baseline"
    labels = [i["label"] for i in d["implied"]]
    assert any(label.startswith("published") for label in labels)
    assert any(label.startswith("measured: trained embedded") for label in labels)
    assert d["per_token_ms"] == pytest.approx(d["autoregressive_decode_ms"] / 16)


def test_variants_past_the_time_budget_are_skipped_and_reported(tmp_path, capsys):
    main(["--shape", "tiny", "--device", "cpu", "--out", str(tmp_path), "--windows", "1",
          "--warmup", "1", "--budget-s", "0", "--threads", "1"])
    bench = json.loads((tmp_path / "bench.json").read_text())
    assert bench["complete"] is True and bench["variants"] == {}
    assert "time budget" in bench["skipped"]["reference"]
    assert "time budget" in bench["skipped"]["flashdrive"]
    assert "### Not measured" in capsys.readouterr().out


def test_variants_option_times_only_the_named_variants(tmp_path):
    main(["--shape", "tiny", "--device", "cpu", "--out", str(tmp_path), "--windows", "1",
          "--warmup", "1", "--threads", "1", "--samples", "1", "--no-reference",
          "--variants", "baseline,cached_velocity"])
    bench = json.loads((tmp_path / "bench.json").read_text())
    assert set(bench["variants"]) == {"baseline", "cached_velocity"}
    assert bench["skipped"] == {}


def test_variants_option_refuses_an_unknown_name(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--shape", "tiny", "--device", "cpu", "--out", str(tmp_path),
              "--variants", "baseline,warp_drive"])
    assert "warp_drive" in capsys.readouterr().err


def test_tensorrt_variants_leave_out_what_the_backend_cannot_run():
    torch_variants, torch_skipped = variant_overrides("cuda")
    assert {ALL_PRE_ROPE, "cuda_graphs"} <= set(torch_variants) and not torch_skipped
    assert ar_counterpart("flashdrive", torch_variants["flashdrive"], "cuda") == "cuda_graphs"
    assert ar_counterpart("flashdrive_compiled", torch_variants["flashdrive_compiled"],
                          "cuda") is None
    variants, skipped = variant_overrides("cuda", "tensorrt")
    assert set(variants) == {"baseline", "flashdrive", "streaming", "speculative",
                             "cached_velocity", "flashdrive_plain_logits", *AT_L}
    assert "set backend 'torch'" in skipped["flashdrive_fp8"]
    assert "before RoPE" in skipped[ALL_PRE_ROPE] and "cuda_graphs" in skipped["cuda_graphs"]
    assert ar_counterpart("flashdrive", variants["flashdrive"], "cuda", "tensorrt") == "baseline"


def tensorrt_refusal(tmp_path, capsys, device: str) -> str:
    """flashdrive-bench --backend tensorrt on `device` exits 2; returns its stderr."""
    with pytest.raises(SystemExit) as exit_info:
        main(["--shape", "tiny", "--device", device, "--out", str(tmp_path),
              "--backend", "tensorrt"])
    assert exit_info.value.code == 2
    return capsys.readouterr().err


def test_tensorrt_backend_is_refused_on_the_cpu(tmp_path, capsys):
    assert "--backend tensorrt needs --device cuda" in tensorrt_refusal(tmp_path, capsys, "cpu")
    assert not (tmp_path / "bench.json").exists()


@pytest.mark.skipif(importlib.util.find_spec("tensorrt") is not None,
                    reason="TensorRT is installed here")
def test_tensorrt_backend_without_tensorrt_is_refused_clearly(tmp_path, capsys):
    assert "import tensorrt" in tensorrt_refusal(tmp_path, capsys, "cuda")
