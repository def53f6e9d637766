"""The backbone's decoder layers compiled (torch.compile, Inductor) inside the graphed decode,
verify and finish steps against the same layers run as they are: the switch's rules, the
capture-safe backbone step on the CPU (run eagerly) and whole engine steps, on the CPU and
under CUDA graphs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.compile_support import inductor_compiles_flex_on_cpu
from helpers.engines import cuda_float32_engines
from helpers.windows import window
from torch._dynamo.utils import counters

from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.engine.engine import Engine
from flashdrive_ros.engine.graphed_steps import GraphedTarget
from flashdrive_ros.model.backbone import run_decoder_layer
from flashdrive_ros.model.cache_attention import FlexCacheAttention, GemmCacheAttention
from flashdrive_ros.model.config import ConfigError
from flashdrive_ros.model.kv_cache import KVCache
from flashdrive_ros.model.positions import text_positions

pytestmark = pytest.mark.usefixtures("one_thread", "in_process_compile")
BLOCK = 8


@pytest.fixture(scope="module")
def compiled_layer():
    """One compiled decoder layer shared by the module's tests (its graphs compile once)."""
    return torch.compile(run_decoder_layer, fullgraph=True, dynamic=False)


def _engine(parts, **changes) -> Engine:
    model, tok, drafter = parts
    return Engine(model, tok, drafter, EngineConfig(max_coc_tokens=6, num_samples=2,
                                                    **changes))


def _copy(cache: KVCache) -> KVCache:
    layers, batch, heads, capacity, dim = cache.k.shape
    copy = KVCache(layers, batch, heads, capacity, dim, cache.k.dtype, cache.k.device,
                   rotated_keys=cache.k_rot is not None)
    copy.k.copy_(cache.k)
    copy.v.copy_(cache.v)
    if cache.k_rot is not None:
        copy.k_rot.copy_(cache.k_rot)
    copy.positions.copy_(cache.positions)
    copy.advance_to(cache.length)
    return copy


def test_compiled_backbone_is_a_switch_of_the_graphed_steps():
    assert EngineConfig().compiled_backbone is False
    assert EngineConfig(device="cuda", compiled_backbone=True).cuda_graphs
    assert EngineConfig(device="cuda", compiled_backbone=True, compiled_expert=True
                        ).compiled_backbone
    with pytest.raises(ConfigError, match="set verify_attention 'masked', or compiled_backbone"):
        EngineConfig(device="cuda", compiled_backbone=True, verify_attention="flex")
    with pytest.raises(ConfigError, match="set cuda_graphs true, or compiled_backbone false"):
        EngineConfig(compiled_backbone=True)
    with pytest.raises(ConfigError, match="set cuda_graphs true"):
        EngineConfig(device="cuda", cuda_graphs=False, compiled_backbone=True)
    with pytest.raises(ConfigError, match="compiled_backbone must be true or false"):
        EngineConfig(device="cuda", compiled_backbone="yes")
    wanted = {"compiled_backbone": True}
    assert EngineConfig.where_applicable(wanted, device="cuda").compiled_backbone
    assert not EngineConfig.where_applicable(wanted, device="cpu").compiled_backbone
    assert not EngineConfig.where_applicable({**wanted, "cuda_graphs": False},
                                             device="cuda").compiled_backbone


@pytest.mark.parametrize("attention", ["masked", "flex", "gemm"])
def test_compiled_layers_step_the_plain_backbone_with_one_graph_for_every_layer(
        parts, compiled_layer, attention):
    if attention == "flex" and not inductor_compiles_flex_on_cpu():
        pytest.skip("Inductor has no flex_attention lowering for this CPU (it needs AVX2)")
    engine = _engine(parts)
    engine.step(window(0))
    vlm, cache = engine.model.vlm, engine.stream.cache
    backbone = vlm.language_model
    start = cache.length
    slots = torch.arange(start, start + BLOCK)
    positions = text_positions(int(cache.positions[0, 0, start - 1]) + 1, BLOCK)  # [3, 1, T]
    flex = {"masked": None,
            "flex": FlexCacheAttention(cache.capacity, BLOCK, "cpu", compiled=False),
            "gemm": GemmCacheAttention(cache.capacity, BLOCK, "cpu")}[attention]
    plain, compiled = _copy(cache), _copy(cache)
    with torch.no_grad():
        embeds = backbone.embed_tokens(torch.arange(100, 100 + BLOCK))[None]  # [1, T, H]
        want = backbone.forward_static(embeds, positions, plain, slots, (1, 2), flex)
        graphs_before = counters["stats"]["unique_graphs"]
        got = backbone.forward_static(embeds, positions, compiled, slots, (1, 2), flex,
                                      compiled_layer)
        graphs = counters["stats"]["unique_graphs"] - graphs_before
        want_logits, got_logits = vlm.lm_head(want.hidden), vlm.lm_head(got.hidden)
    torch.testing.assert_close(got_logits, want_logits, rtol=0, atol=1e-5)
    for i in (1, 2):
        torch.testing.assert_close(got.layer_hidden[i], want.layer_hidden[i], rtol=0,
                                   atol=1e-5)
    for name in ("k", "v", "k_rot"):
        torch.testing.assert_close(getattr(compiled, name), getattr(plain, name), rtol=0,
                                   atol=1e-5)
    assert graphs == 1


def test_engine_with_compiled_backbone_matches_the_eager_graphed_engine(parts):
    # One Euler step: the random tiny expert amplifies float rounding over many steps.
    changes = dict(cached_velocity=False, baseline_flow_steps=1)
    plain, compiled = _engine(parts, **changes), _engine(parts, **changes)
    plain.graphs, compiled.graphs = plain.graphed_steps(), compiled.graphed_steps()
    compiled.graphs.target = GraphedTarget(compiled.target, compiled.stream.cache,
                                           compiled_layers=True)
    for step in (0, 1, 2):
        a, b = plain.step(window(step)), compiled.step(window(step))
        assert b.coc_token_ids == a.coc_token_ids and b.accepted_lengths == a.accepted_lengths
        ca, cb = plain.stream.cache, compiled.stream.cache
        assert cb.length == ca.length
        torch.testing.assert_close(cb.k_rot[..., :cb.length, :], ca.k_rot[..., :ca.length, :],
                                   rtol=0, atol=1e-5)
        np.testing.assert_allclose(b.trajectories, a.trajectories, rtol=0, atol=1e-4)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_engine_with_compiled_backbone_matches_the_graphed_engine(parts):
    """float32: the fused kernels sum in another order (relative 2e-4 at the far end of the
    plan, as with the compiled expert). Dynamo's cache starts empty, so the graphs of the
    tests before do not count against its recompile limit (8 graphs of one function)."""
    torch._dynamo.reset()
    engines = cuda_float32_engines(parts, "compiled_backbone")
    compiled_graphs = 0
    for step in (0, 1, 2, 3, 5):
        plain = engines[0].step(window(step))
        graphs_before = counters["stats"]["unique_graphs"]
        compiled = engines[1].step(window(step))
        compiled_graphs += counters["stats"]["unique_graphs"] - graphs_before
        assert compiled.coc_token_ids == plain.coc_token_ids
        assert compiled.accepted_lengths == plain.accepted_lengths
        np.testing.assert_allclose(compiled.trajectories, plain.trajectories, rtol=2e-4,
                                   atol=1e-3)
    token_counts = engines[1].graphs.target.step.captured_shapes
    assert token_counts >= 1 and compiled_graphs == token_counts
