import pytest
import torch

from flashdrive_ros.model.config import tiny
from flashdrive_ros.model.expert import ActionExpert, expert_positions
from flashdrive_ros.model.kv_cache import KVCache


def _setup(seed: int = 0, length: int = 30):
    torch.manual_seed(seed)
    cfg = tiny()
    expert = ActionExpert(cfg.expert, cfg.text).eval()
    t = cfg.text
    cache = KVCache(t.num_hidden_layers, 1, t.num_key_value_heads, 48, t.head_dim)
    cache.k.normal_()
    cache.v.normal_()
    cache.positions[:] = torch.arange(48)
    cache.positions[1:, :, 5:15] = torch.arange(10) % 4
    cache.advance_to(length)
    return cfg, expert, cache


def test_shape_positions_and_cache_untouched():
    cfg, expert, cache = _setup()
    x = torch.randn(3, 64, cfg.expert.hidden_size)
    pos = expert_positions(cache, 26, 64)
    assert pos.shape == (3, 1, 64)
    assert pos[:, 0, 0].tolist() == [26, 26, 26] and pos[0, 0, -1] == 89
    k_before, v_before = cache.k.clone(), cache.v.clone()
    with torch.no_grad():
        y = expert(x, pos, cache, 26)
    assert y.shape == x.shape and torch.isfinite(y).all()
    assert torch.equal(cache.k, k_before) and torch.equal(cache.v, v_before)
    assert cache.length == 30


def test_action_tokens_attend_bidirectionally():
    cfg, expert, cache = _setup()
    x = torch.randn(1, 64, cfg.expert.hidden_size)
    pos = expert_positions(cache, 26, 64)
    x2 = x.clone()
    x2[:, -1] += 1.0
    with torch.no_grad():
        y, y2 = expert(x, pos, cache, 26), expert(x2, pos, cache, 26)
    assert (y[:, 0] - y2[:, 0]).abs().max() > 1e-4


def test_samples_share_cache_and_match_single_runs():
    cfg, expert, cache = _setup()
    x = torch.randn(4, 64, cfg.expert.hidden_size)
    pos = expert_positions(cache, 26, 64)
    with torch.no_grad():
        batched = expert(x, pos, cache, 26)
        single = torch.cat([expert(x[i:i + 1], pos, cache, 26) for i in range(4)])
    torch.testing.assert_close(batched, single, atol=1e-5, rtol=1e-5)


def test_prefix_len_bounds_what_is_attended_and_layer_i_reads_cache_layer_i():
    cfg, expert, cache = _setup()
    x = torch.randn(2, 64, cfg.expert.hidden_size)
    pos = expert_positions(cache, 26, 64)
    with torch.no_grad():
        ref = expert(x, pos, cache, 26)
        cache.k[:, :, :, 26:30] += 5.0
        cache.v[:, :, :, 26:30] += 5.0
        torch.testing.assert_close(expert(x, pos, cache, 26), ref)
        changed = []
        for layer in range(cache.num_layers):
            saved = cache.v[layer].clone()
            cache.v[layer, :, :, 3] += 3.0
            changed.append(float((expert(x, pos, cache, 26) - ref).abs().max()))
            cache.v[layer] = saved
        assert all(c > 1e-5 for c in changed)


def test_bad_inputs_raise():
    cfg, expert, cache = _setup()
    x = torch.randn(2, 64, cfg.expert.hidden_size)
    pos = expert_positions(cache, 26, 64)
    with pytest.raises(ValueError, match="prefix_len"):
        expert(x, pos, cache, 31)
    with pytest.raises(ValueError, match="positions"):
        expert(x, pos[:, :, :10], cache, 26)
    with pytest.raises(ValueError, match="input"):
        expert(x[..., :10], pos, cache, 26)
    t = cfg.text
    wide = KVCache(t.num_hidden_layers, 2, t.num_key_value_heads, 48, t.head_dim)
    wide.advance_to(30)
    with pytest.raises(ValueError, match="batch-1"):
        expert(x, pos, wide, 26)


def test_matches_transformers_qwen3vl_text_model_with_same_weights():
    transformers = pytest.importorskip("transformers")
    from transformers.cache_utils import DynamicCache
    from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLTextConfig
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextModel

    from flashdrive_ros.model.rope import apply_rotary, mrope_cos_sin

    assert transformers.__version__
    cfg, expert, cache = _setup(seed=1)
    e, t = cfg.expert, cfg.text
    hf_cfg = Qwen3VLTextConfig(
        vocab_size=16, hidden_size=e.hidden_size, intermediate_size=e.intermediate_size,
        num_hidden_layers=e.num_hidden_layers, num_attention_heads=e.num_attention_heads,
        num_key_value_heads=e.num_key_value_heads, head_dim=e.head_dim,
        rms_norm_eps=e.rms_norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": t.rope_theta,
                         "mrope_section": list(t.mrope_section), "mrope_interleaved": True})
    hf_cfg._attn_implementation = "eager"
    hf = Qwen3VLTextModel(hf_cfg).eval()
    del hf.embed_tokens
    missing, unexpected = hf.load_state_dict(expert.state_dict(), strict=False)
    assert not unexpected and not [m for m in missing if "embed_tokens" not in m]

    k_samples, prefix = 2, 26
    x = torch.randn(k_samples, 64, e.hidden_size)
    pos = expert_positions(cache, prefix, 64)
    hf_cache = DynamicCache(config=hf_cfg)
    cos, sin = mrope_cos_sin(cache.positions[:, :, :prefix], expert.inv_freq, t.mrope_section)
    for layer in range(e.num_hidden_layers):
        k, v, _ = cache.layer_view(layer, prefix)
        hf_cache.update(apply_rotary(k, cos, sin).expand(k_samples, -1, -1, -1).contiguous(),
                        v.expand(k_samples, -1, -1, -1).contiguous(), layer)
    mask = torch.zeros(k_samples, 1, 64, prefix + 64)
    with torch.no_grad():
        ref = hf(inputs_embeds=x, position_ids=pos.expand(3, k_samples, 64),
                 past_key_values=hf_cache, attention_mask=mask, use_cache=True).last_hidden_state
        ours = expert(x, pos, cache, prefix)
    torch.testing.assert_close(ours, ref, atol=1e-4, rtol=1e-4)


def test_precomputed_rotated_prefix_gives_same_output():
    cfg, expert, cache = _setup(seed=2)
    x = torch.randn(3, 64, cfg.expert.hidden_size)
    pos = expert_positions(cache, 20, 64)
    with torch.no_grad():
        prefix = expert.rotated_prefix(cache, 20, x.dtype)
        torch.testing.assert_close(expert(x, pos, cache, 20, prefix), expert(x, pos, cache, 20))
        with pytest.raises(ValueError, match="prefix was not made"):
            expert(x, pos, cache, 21, prefix)


@pytest.mark.parametrize("staged", [False, True])
def test_attention_equals_softmax_over_masked_prefix_and_own_keys(staged):
    from flashdrive_ros.model.expert import ExpertAttention, StagedKV
    from flashdrive_ros.model.rope import apply_rotary

    cfg = tiny().expert
    torch.manual_seed(3)
    attn = ExpertAttention(cfg).eval()
    k_samples, n, p, d = 3, 5, 9, cfg.head_dim
    cos, sin = torch.randn(1, n, d).cos(), torch.randn(1, n, d).sin()
    prefix_k = torch.randn(1, cfg.num_key_value_heads, p, d)
    prefix_v = torch.randn(1, cfg.num_key_value_heads, p, d)
    mask = torch.cat([torch.arange(p) < 6, torch.ones(n, dtype=torch.bool)])[None, None, None]
    prefix = (StagedKV.stage(prefix_k, prefix_v, k_samples, n) if staged
              else (prefix_k, prefix_v))
    for _ in range(2):
        x = torch.randn(k_samples, n, cfg.hidden_size)
        with torch.no_grad():
            out = attn(x, cos, sin, prefix, mask)
            h, hkv = cfg.num_attention_heads, cfg.num_key_value_heads
            q = attn.q_norm(attn.q_proj(x).view(k_samples, n, h, d))
            k = attn.k_norm(attn.k_proj(x).view(k_samples, n, hkv, d))
            v = attn.v_proj(x).view(k_samples, n, hkv, d).transpose(1, 2)
            q = apply_rotary(q.transpose(1, 2), cos, sin)
            k = apply_rotary(k.transpose(1, 2), cos, sin)
            rows = []
            for head in range(h):
                kv = head // (h // hkv)
                keys = torch.cat([prefix_k[0, kv, :6].expand(k_samples, -1, -1), k[:, kv]],
                                 dim=1)
                values = torch.cat([prefix_v[0, kv, :6].expand(k_samples, -1, -1), v[:, kv]],
                                   dim=1)
                weights = (q[:, head] @ keys.transpose(1, 2) * d ** -0.5).softmax(dim=-1)
                rows.append(weights @ values)  # [K, N, D]
            expected = attn.o_proj(torch.stack(rows, dim=2).reshape(k_samples, n, h * d))
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("masked", [False, True])
def test_staged_prefix_gives_the_concatenated_prefix_output_exactly(masked):
    cfg, expert, cache = _setup(seed=4)
    pos = expert_positions(cache, 20, 64)
    with torch.no_grad():
        prefix = expert.rotated_prefix(cache, 20, torch.float32)
        staged = expert.stage(prefix, 3, 64)
        prefix_mask = (torch.arange(20) % 7 != 3) if masked else None
        for step in range(3):
            x = torch.randn(3, 64, cfg.expert.hidden_size)
            want = expert.forward_prefix(x, pos, prefix, prefix_mask)
            got = expert.forward_prefix(x, pos, staged, prefix_mask)
            assert torch.equal(got, want), step
    assert staged[0].keys.shape == (3, cfg.expert.num_key_value_heads, 20 + 64,
                                    cfg.expert.head_dim)
    assert all(torch.equal(layer.keys[:, :, :20], k.expand(3, -1, -1, -1))
               and torch.equal(layer.values[:, :, :20], v.expand(3, -1, -1, -1))
               for layer, (k, v) in zip(staged, prefix))
