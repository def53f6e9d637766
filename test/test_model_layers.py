"""The layers shared by backbone, expert and drafters: checkpoint names, the grouped-query
attention layout, the SwiGLU formula and the RMSNorm forms."""

import pytest
import torch
import torch.nn.functional as F

from flashdrive_ros.model.config import tiny
from flashdrive_ros.model.layers import QKNormAttention, RMSNorm, SwiGLU


def test_parameter_names_are_the_checkpoint_names():
    attn = QKNormAttention(tiny().text)
    assert list(attn.state_dict()) == [
        "q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight",
        "q_norm.weight", "k_norm.weight"]
    assert list(SwiGLU(8, 16).state_dict()) == [
        "gate_proj.weight", "up_proj.weight", "down_proj.weight"]
    assert list(RMSNorm(8, 1e-6).state_dict()) == ["weight"]


def test_grouped_attention_equals_attention_with_repeated_kv_heads():
    torch.manual_seed(0)
    cfg = tiny().text
    attn = QKNormAttention(cfg)
    x, context = torch.randn(2, 5, cfg.hidden_size), torch.randn(2, 9, cfg.hidden_size)
    q, k, v = attn.queries(x), attn.keys(context), attn.values(context)
    assert q.shape == (2, cfg.num_attention_heads, 5, cfg.head_dim)
    assert k.shape == v.shape == (2, cfg.num_key_value_heads, 9, cfg.head_dim)
    mask = torch.rand(2, 1, 1, 9) > 0.3
    mask[..., 0] = True
    group = cfg.num_attention_heads // cfg.num_key_value_heads
    want = F.scaled_dot_product_attention(q, k.repeat_interleave(group, dim=1),
                                          v.repeat_interleave(group, dim=1), attn_mask=mask)
    got = attn.grouped_attention(q, k, v, mask)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
    out = attn.output(got)
    assert out.shape == (2, 5, cfg.hidden_size)
    torch.testing.assert_close(out, attn.o_proj(want.transpose(1, 2).flatten(2)))


def test_empty_token_axis_projects_to_empty_heads():
    cfg = tiny().text
    attn = QKNormAttention(cfg, input_size=2 * cfg.hidden_size)
    assert attn.keys(torch.zeros(2, 0, 2 * cfg.hidden_size)).shape == (
        2, cfg.num_key_value_heads, 0, cfg.head_dim)


def test_swiglu_formula():
    torch.manual_seed(1)
    mlp = SwiGLU(8, 16)
    x = torch.randn(3, 8)
    want = (F.silu(x @ mlp.gate_proj.weight.T) * (x @ mlp.up_proj.weight.T)) @ \
        mlp.down_proj.weight.T
    torch.testing.assert_close(mlp(x), want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_unfused_rms_norm_is_the_elementary_form(dtype):
    torch.manual_seed(2)
    norm = RMSNorm(16, 1e-5, fused=False).to(dtype)
    with torch.no_grad():
        norm.weight.copy_(1.0 + 0.1 * torch.randn(16))
    x = (3.0 * torch.randn(4, 16)).to(dtype)
    assert torch.equal(norm(x), norm.unfused(x))
    x32 = x.float()
    want = norm.weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-5)).to(dtype)
    assert torch.equal(norm(x), want)
