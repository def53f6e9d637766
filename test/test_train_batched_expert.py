import torch

from flashdrive_ros.model.action import ActionInProj, velocity
from flashdrive_ros.model.backbone import TextBackbone
from flashdrive_ros.model.config import tiny
from flashdrive_ros.model.expert import ActionExpert
from flashdrive_ros.model.kv_cache import KVCache
from flashdrive_ros.train.batched_expert import batched_velocity
from flashdrive_ros.train.grad_cache import GradKVCache


def _setup(batch: int, length: int):
    torch.manual_seed(0)
    cfg = tiny()
    backbone = TextBackbone(cfg.text).eval()
    expert = ActionExpert(cfg.expert, cfg.text).eval()
    in_proj = ActionInProj(cfg.action, cfg.expert.hidden_size).eval()
    out_proj = torch.nn.Linear(cfg.expert.hidden_size, 2)
    embeds = torch.randn(batch, length, cfg.text.hidden_size)
    positions = torch.arange(length).view(1, 1, length).expand(3, batch, length).clone()
    positions[1, :, 2:5] += 1
    return cfg, backbone, expert, in_proj, out_proj, embeds, positions


def test_grad_cache_matches_inference_cache_and_backpropagates():
    cfg, backbone, _, _, _, embeds, positions = _setup(2, 9)
    t = cfg.text
    slots = torch.arange(9)
    plain = KVCache(t.num_hidden_layers, 2, t.num_key_value_heads, 9, t.head_dim)
    grad = GradKVCache(t.num_hidden_layers, 2, t.num_key_value_heads, 9, t.head_dim)
    with torch.no_grad():
        ref = backbone(embeds, positions, plain, slots).hidden
    out = backbone(embeds, positions, grad, slots).hidden
    torch.testing.assert_close(out, ref)
    out.square().mean().backward()
    assert backbone.layers[0].self_attn.k_proj.weight.grad.abs().sum() > 0


def test_batched_velocity_matches_per_window_velocity():
    cfg, backbone, expert, in_proj, out_proj, embeds, positions = _setup(3, 12)
    t = cfg.text
    cache = KVCache(t.num_hidden_layers, 3, t.num_key_value_heads, 12, t.head_dim)
    with torch.no_grad():
        backbone(embeds, positions, cache, torch.arange(12))
    prefix_lens = torch.tensor([12, 7, 10])
    x_t = torch.randn(3, cfg.action.num_waypoints, 2)
    times = torch.tensor([0.1, 0.5, 0.9])
    with torch.no_grad():
        got = batched_velocity(expert, in_proj, out_proj, x_t, times, cache, prefix_lens)
    for b in range(3):
        single = KVCache(t.num_hidden_layers, 1, t.num_key_value_heads, 12, t.head_dim)
        single.k.copy_(cache.k[:, b:b + 1])
        single.v.copy_(cache.v[:, b:b + 1])
        single.positions.copy_(cache.positions[:, b:b + 1])
        single.advance_to(12)
        with torch.no_grad():
            ref = velocity(expert, in_proj, out_proj, x_t[b:b + 1], times[b:b + 1], single,
                           int(prefix_lens[b]))
        torch.testing.assert_close(got[b:b + 1], ref, atol=1e-5, rtol=1e-4)
