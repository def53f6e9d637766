"""A cache that keeps keys after RoPE against the plain pre-RoPE cache rotated at use."""

import numpy as np
import pytest
import torch
from helpers.engines import plans_with_switch
from helpers.streaming import new_state, prefill_window

from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.model.config import ConfigError
from flashdrive_ros.model.kv_cache import KVCache
from flashdrive_ros.model.rope import apply_rotary

pytestmark = pytest.mark.usefixtures("one_thread")


def rotated_state(cfg):
    state = new_state(cfg)
    text = cfg.text
    state.cache = KVCache(text.num_hidden_layers, 1, text.num_key_value_heads, 512,
                          text.head_dim, rotated_keys=True)
    return state


def test_streaming_prefill_and_decode_match_the_plain_cache(tiny_vlm):
    vlm, cfg = tiny_vlm
    plain, rotated = new_state(cfg), rotated_state(cfg)
    for step in range(4):
        plan_a, out_a, _, _ = prefill_window(vlm, cfg, plain, step)
        plan_b, out_b, _, _ = prefill_window(vlm, cfg, rotated, step)
        assert plan_a.full == plan_b.full == (step == 0)
        torch.testing.assert_close(out_b.logits, out_a.logits, rtol=1e-4, atol=1e-5)
        cache = rotated.cache
        assert not cache.has_moved
        n = cache.length
        cos, sin = vlm.language_model.rotary_cos_sin(cache.positions[:, :, :n], torch.float32)
        for layer in range(cache.num_layers):
            expected = apply_rotary(cache.k[layer, :, :, :n], cos, sin)
            torch.testing.assert_close(cache.k_rot[layer, :, :, :n], expected,
                                       rtol=1e-5, atol=1e-6)
        for state in (plain, rotated):
            slots = torch.tensor([state.cache.length])
            positions = state.cache.positions[:, :, state.cache.length - 1:state.cache.length] + 1
            embeds = vlm.language_model.embed_tokens(torch.tensor([[7]]))
            with torch.no_grad():
                out = vlm.language_model.forward_static(embeds, positions, state.cache, slots)
            state.decoded = out.hidden
        torch.testing.assert_close(rotated.decoded, plain.decoded, rtol=1e-4, atol=1e-5)


def test_static_step_refuses_moved_slots_before_a_forward(tiny_vlm):
    vlm, cfg = tiny_vlm
    state = rotated_state(cfg)
    prefill_window(vlm, cfg, state, 0)
    state.cache.set_positions(torch.tensor([0, 1]), state.cache.positions[:, :, :2] + 1)
    embeds = vlm.language_model.embed_tokens(torch.tensor([[7]]))
    slots = torch.tensor([state.cache.length])
    with pytest.raises(ValueError, match="moved"):
        vlm.language_model.forward_static(embeds, state.cache.positions[:, :, :1], state.cache,
                                          slots)


def test_engine_plans_match_with_and_without_rotated_keys(parts):
    runs = plans_with_switch(parts, "rotated_keys")
    for rotated, (eng, _) in runs.items():
        assert (eng.stream.cache.k_rot is not None) == rotated
    plans = {value: plans for value, (_, plans) in runs.items()}
    for a, b in zip(plans[True], plans[False]):
        assert a.full_prefill == b.full_prefill
        assert a.coc_token_ids == b.coc_token_ids
        assert a.accepted_lengths == b.accepted_lengths
        np.testing.assert_allclose(a.trajectories, b.trajectories, rtol=0, atol=1e-3)
    assert [p.full_prefill for p in plans[True]] == [True, False, False]


def test_rotated_keys_defaults_and_refusals():
    assert EngineConfig().rotated_keys is True
    assert EngineConfig.baseline().rotated_keys is False
    assert EngineConfig(rotated_keys=False).rotated_keys is False
    with pytest.raises(ConfigError, match="tensorrt"):
        EngineConfig(device="cuda", backend="tensorrt", cuda_graphs=False, rotated_keys=True)
    with pytest.raises(ConfigError, match="rotated_keys"):
        EngineConfig(rotated_keys="yes")
    cache = KVCache(1, 1, 1, 4, 2, rotated_keys=True)
    with pytest.raises(ValueError, match="k_rotated"):
        cache.write(0, torch.tensor([0]), torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 1, 2))
