import pytest
import torch

from flashdrive_ros.bench.costs import (
    Pass,
    drafter_params,
    expert_layer_params,
    expert_pass,
    merger_params,
    patch_embed_params,
    text_layer_params,
    text_pass,
    vision_block_params,
    vision_pass,
)
from flashdrive_ros.bench.floors import Floors
from flashdrive_ros.bench.work import Work, decode_passes, full_prefill_keys, stage_floors
from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.config import tiny
from flashdrive_ros.model.drafter import Drafter

CFG = tiny()


def matrix_params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters() if p.ndim >= 2)


def test_param_counts_by_hand():
    # text: q, o 128 x 4*32; k, v 128 x 2*32; gate, up, down 128 x 256
    assert text_layer_params(CFG.text) == 2 * 128 * 128 + 2 * 128 * 64 + 3 * 128 * 256 == 147456
    assert expert_layer_params(CFG.expert) == 2 * 64 * 128 + 2 * 64 * 64 + 3 * 64 * 128 == 49152
    assert vision_block_params(CFG.vision) == 4 * 64 * 64 + 2 * 64 * 128 == 32768
    assert merger_params(CFG.vision) == 256 * 256 + 256 * 128 == 98304
    assert patch_embed_params(CFG.vision) == 3 * 2 * 8 * 8 * 64 == 24576


def test_param_counts_match_the_modules():
    model = AlpamayoModel(CFG)
    drafter = Drafter(CFG.drafter, CFG.text)
    assert text_layer_params(CFG.text) == matrix_params(model.vlm.language_model.layers[0])
    assert expert_layer_params(CFG.expert) == matrix_params(model.expert.layers[0])
    visual = model.vlm.visual
    assert vision_block_params(CFG.vision) == matrix_params(visual.blocks[0])
    assert merger_params(CFG.vision) == matrix_params(visual.merger)
    assert patch_embed_params(CFG.vision) == matrix_params(visual.patch_embed)
    assert drafter_params(CFG.drafter, CFG.text) == matrix_params(drafter)


def test_text_pass_by_hand():
    p = text_pass(CFG.text, tokens=10, keys_total=55, kv_slots=10, logits_tokens=1,
                  dtype_bytes=4)
    attn = 4 * 4 * 32 * 55
    assert p.flops == 4 * (2 * 10 * 147456 + attn) + 2 * 128 * 4600 == 13086720
    kv = 2 * 4 * 2 * 32 * 10 * 4
    assert p.bytes == (4 * 147456 + 128 * 4600) * 4 + kv == 4734976
    no_logits = text_pass(CFG.text, 10, 55, 10, 0, 4)
    assert no_logits.bytes == 4 * 147456 * 4 + kv


def test_vision_pass_by_hand():
    p = vision_pass(CFG.vision, images=2, patches_per_image=48, dtype_bytes=4)
    n = 96
    flops = 2 * n * 24576 + 3 * (2 * n * 32768 + 4 * 64 * 48 * n) + 3 * 2 * (n // 4) * 98304
    assert p.flops == flops == 41287680
    assert p.bytes == (24576 + 3 * 32768 + 3 * 98304) * 4 == 1671168


def test_expert_pass_by_hand():
    p = expert_pass(CFG.expert, CFG.text, samples=2, action_tokens=64, prefix=100,
                    dtype_bytes=4)
    assert p.flops == 4 * (2 * 128 * 49152 + 4 * 4 * 32 * 128 * 164) == 93323264
    assert p.bytes == 4 * 49152 * 4 + 2 * 4 * 2 * 32 * 100 * 4 == 991232


def work(**changes) -> Work:
    values = dict(images=16, prompt_length=100, prefill_tokens=100,
                  prefill_keys=full_prefill_keys(100), decode="autoregressive", coc_tokens=16,
                  rounds=15.0, hf_new_tokens=19, velocity_calls=10, samples=1)
    return Work(**{**values, **changes})


def test_decode_passes_follow_the_decoding_loops():
    step = text_pass(CFG.text, 1, 100, 100, 1, 4)
    finish = text_pass(CFG.text, 3, 300, 100, 3, 4)
    assert decode_passes(CFG, work(), 4) == [step] * 15 + [finish]
    assert decode_passes(CFG, work(decode="hf_generate"), 4) == [step] * 18
    spec = decode_passes(CFG, work(decode="speculative", rounds=2.5), 4)
    verify = text_pass(CFG.text, 8, 800, 100, 8, 4)
    assert spec[1] == Pass(2.5 * verify.flops, 2.5 * verify.bytes) and spec[2] == finish


def test_stage_floor_is_the_roofline_sum():
    floors = Floors(copy_bytes_per_s=1e9, matmul_flops_per_s=1e11, copy_buffer_bytes=1,
                    matmul_n=1, matmul_dtype="float32")
    result = stage_floors(CFG, work(), 4, floors)
    step = text_pass(CFG.text, 1, 100, 100, 1, 4)
    finish = text_pass(CFG.text, 3, 300, 100, 3, 4)
    expected_s = 15 * max(step.bytes / 1e9, step.flops / 1e11) + max(
        finish.bytes / 1e9, finish.flops / 1e11)
    assert result["decode"]["floor_ms"] == pytest.approx(expected_s * 1e3)
    assert result["decode"]["bound"] == "memory"
    prefill = text_pass(CFG.text, 100, 5050, 100, 1, 4)
    assert result["prefill"]["flops"] == prefill.flops
    assert result["total"]["floor_ms"] == pytest.approx(
        sum(result[s]["floor_ms"] for s in ("encode", "prefill", "decode", "action")))
