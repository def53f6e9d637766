"""Length-aware verify attention (FlexAttention by the block's first slot) and the GEMM
attention against the dense masked path: the attention alone, the graphed target's steps run
eagerly, whole greedy speculative decodes; on CUDA the kernels under CUDA graphs inside the
engine.

Tolerances: float32 paths differ only in summation order (1e-5 on unit-scale outputs);
bfloat16 keeps 8 bits of mantissa, so outputs of unit scale agree to a few 2^-8 (2e-2)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.engine.decoding import StopRule, Target, prefill, required_capacity
from flashdrive_ros.engine.graphed_steps import GraphedTarget
from flashdrive_ros.engine.speculative import DFlashProposer, speculative_decode
from flashdrive_ros.model.cache_attention import (
    KV_BLOCK,
    FlexCacheAttention,
    FlexPrefixAttention,
    GemmCacheAttention,
    GemmPrefixAttention,
)
from flashdrive_ros.model.config import ConfigError, tiny
from flashdrive_ros.model.drafter import Drafter
from flashdrive_ros.model.kv_cache import KVCache
from flashdrive_ros.model.positions import text_positions
from flashdrive_ros.model.vlm import VLM

CFG = tiny(vocab_size=512)
STOP = StopRule(cot_end_id=510, traj_future_start_id=511, max_new_tokens=16)
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="the compiled flex kernel under CUDA graphs needs CUDA")

pytestmark = [pytest.mark.usefixtures("one_thread"),
              pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")]


def masked_reference(q, keys, values, start):
    """q: [B, Hq, T, D] at slots [start, start + T) over keys [B, Hkv, C, D], dense mask."""
    t, capacity = q.shape[2], keys.shape[2]
    slots = torch.arange(start, start + t, device=q.device)
    mask = torch.arange(capacity, device=q.device)[None, :] <= slots[:, None]  # [T, C]
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)


def random_qkv(t: int, capacity: int, dtype: torch.dtype, device: str, seed: int = 0):
    g = torch.Generator(device=device).manual_seed(seed)
    heads, kv_heads, dim = 8, 2, 32
    q = torch.randn(1, heads, t, dim, generator=g, device=device, dtype=dtype)
    k = torch.randn(1, kv_heads, capacity, dim, generator=g, device=device, dtype=dtype)
    v = torch.randn(1, kv_heads, capacity, dim, generator=g, device=device, dtype=dtype)
    return q, k, v


@pytest.mark.parametrize("t", [1, 9])
def test_flex_matches_the_masked_attention_at_every_length(t):
    capacity = 3 * KV_BLOCK + 20
    attention = FlexCacheAttention(capacity, t, "cpu", compiled=False)
    q, k, v = random_qkv(t, capacity, torch.float32, "cpu")
    for start in (0, 5, KV_BLOCK - t, KV_BLOCK - 1, KV_BLOCK, 2 * KV_BLOCK + 3, capacity - t):
        attention.update(torch.arange(start, start + t))
        end = start + t
        assert int(attention.kv_num_blocks.flatten()[0]) == -(-end // KV_BLOCK)
        got = attention(q, k, v)
        torch.testing.assert_close(got, masked_reference(q, k, v, start), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("t", [1, 9])
def test_gemm_matches_the_masked_attention_at_every_length(t):
    capacity = 3 * KV_BLOCK + 20
    attention = GemmCacheAttention(capacity, t, "cpu")
    q, k, v = random_qkv(t, capacity, torch.float32, "cpu")
    for start in (0, 5, KV_BLOCK - 1, 2 * KV_BLOCK + 3, capacity - t):
        attention.update(torch.arange(start, start + t))
        got = attention(q, k, v)
        torch.testing.assert_close(got, masked_reference(q, k, v, start), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="built for 9 queries|built for 1 queries"):
        attention(*random_qkv(t + 1, capacity, torch.float32, "cpu"))


def test_flex_refuses_other_shapes():
    attention = FlexCacheAttention(200, 4, "cpu", compiled=False)
    q, k, v = random_qkv(3, 200, torch.float32, "cpu")
    with pytest.raises(ValueError, match="built for 4 queries over 200 slots"):
        attention(q, k, v)
    with pytest.raises(ValueError, match="slots must be"):
        attention.update(torch.arange(3))
    with pytest.raises(ValueError, match="block <= capacity"):
        FlexCacheAttention(3, 4, "cpu", compiled=False)


@pytest.fixture(scope="module")
def target() -> Target:
    torch.manual_seed(0)
    vlm = VLM(CFG.vision, CFG.text).eval()
    return Target(vlm.language_model, vlm.lm_head, CFG.drafter.target_layer_ids)


def prefilled(target: Target, length: int, capacity: int, seed: int) -> tuple:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 500, (1, length), generator=g)
    cache = KVCache(CFG.text.num_hidden_layers, 1, CFG.text.num_key_value_heads, capacity,
                    CFG.text.head_dim, rotated_keys=True)
    with torch.no_grad():
        out = prefill(target, target.embed_tokens(ids), text_positions(0, length), cache,
                      context_len=CFG.drafter.context_len)
    return cache, out


def test_graphed_target_steps_with_flex_match_the_masked_steps(target):
    capacity = 2 * KV_BLOCK + 40
    for length in (30, KV_BLOCK - 3, 2 * KV_BLOCK + 2):
        logits = {}
        for kind in ("masked", "flex", "gemm"):
            cache, _ = prefilled(target, length, capacity, seed=length)
            graphed = GraphedTarget(target, cache, enabled=False, verify_attention=kind)
            with torch.no_grad():
                steps = [graphed.run_tokens(list(range(40, 49)), cache, length),
                         graphed.run_tokens([7], cache, length + 9)]
            logits[kind] = [s.logits for s in steps]
            assert cache.length == length + 10
        for kind in ("flex", "gemm"):
            for got, want in zip(logits[kind], logits["masked"], strict=True):
                torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_speculative_decode_with_flex_equals_the_masked_decode(target):
    torch.manual_seed(1)
    drafter = Drafter(CFG.drafter, CFG.text).eval()
    proposer = DFlashProposer(drafter, target.embed_tokens, target.lm_head)
    length = KV_BLOCK - 5
    capacity = required_capacity(length, STOP, CFG.drafter.block_size)
    decoded = {}
    for kind in ("masked", "flex", "gemm"):
        cache, out = prefilled(target, length, capacity, seed=3)
        graphed = GraphedTarget(target, cache, enabled=False, verify_attention=kind)
        decoded[kind] = speculative_decode(graphed, proposer, out, cache, STOP)
    for kind in ("flex", "gemm"):
        assert decoded[kind].tokens == decoded["masked"].tokens
        assert decoded[kind].accepted_lengths == decoded["masked"].accepted_lengths


def test_flex_is_a_switch_of_the_fixed_shape_steps():
    assert EngineConfig().verify_attention == "masked"
    with pytest.raises(ConfigError, match="set cuda_graphs true"):
        EngineConfig(verify_attention="flex")
    with pytest.raises(ConfigError, match="verify_attention must be one of"):
        EngineConfig(verify_attention="dense")
    assert EngineConfig(device="cuda", verify_attention="flex").cuda_graphs
    assert EngineConfig().action_attention == "masked"
    with pytest.raises(ConfigError, match="set cuda_graphs and staged_prefix true"):
        EngineConfig(action_attention="flex")
    with pytest.raises(ConfigError, match="set cuda_graphs and staged_prefix true"):
        EngineConfig(device="cuda", staged_prefix=False, action_attention="flex")
    with pytest.raises(ConfigError, match="action_attention must be one of"):
        EngineConfig(action_attention="dense")
    cfg = EngineConfig(device="cuda", action_attention="flex")
    assert cfg.cuda_graphs and cfg.staged_prefix
    with pytest.raises(ConfigError, match="verify_attention 'gemm' runs in the fixed-shape"):
        EngineConfig(verify_attention="gemm")
    with pytest.raises(ConfigError, match="action_attention 'gemm' runs in the graphed"):
        EngineConfig(action_attention="gemm")
    cfg = EngineConfig(device="cuda", verify_attention="gemm", action_attention="gemm",
                       compiled_expert=True, compiled_backbone=True)
    assert cfg.cuda_graphs and cfg.staged_prefix and cfg.compiled_expert


def prefix_reference(q, keys, values, length, prefix_slots):
    """q: [K, Hq, N, D] over keys [K, Hkv, S + N, D]: prefix slots below length and every
    action token, dense mask."""
    slots = torch.arange(keys.shape[2], device=q.device)
    mask = ((slots < length) | (slots >= prefix_slots))[None]  # [1, S + N]
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)


@pytest.mark.parametrize("capacity", [3 * KV_BLOCK + 20, 2 * KV_BLOCK])
def test_flex_prefix_matches_the_masked_attention_at_every_length(capacity):
    tokens, samples = 64, 2
    attention = FlexPrefixAttention(capacity, tokens, "cpu", compiled=False)
    assert attention.prefix_slots == -(-capacity // KV_BLOCK) * KV_BLOCK
    g = torch.Generator().manual_seed(4)
    q = torch.randn(samples, 8, tokens, 32, generator=g)
    keys = torch.randn(samples, 2, attention.prefix_slots + tokens, 32, generator=g)
    values = torch.randn(samples, 2, attention.prefix_slots + tokens, 32, generator=g)
    for length in (1, 5, KV_BLOCK - 1, KV_BLOCK, KV_BLOCK + 1, 2 * KV_BLOCK - 3, capacity):
        attention.update(torch.tensor([length]))
        assert int(attention.kv_num_blocks.flatten()[0]) == -(-length // KV_BLOCK) + 1
        got = attention(q, keys, values)
        want = prefix_reference(q, keys, values, length, attention.prefix_slots)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_gemm_prefix_matches_the_masked_attention_at_every_length():
    tokens, samples, capacity = 64, 2, 3 * KV_BLOCK + 20
    attention = GemmPrefixAttention(capacity, tokens, "cpu")
    assert attention.prefix_slots == capacity
    g = torch.Generator().manual_seed(5)
    q = torch.randn(samples, 8, tokens, 32, generator=g)
    keys = torch.randn(samples, 2, capacity + tokens, 32, generator=g)
    values = torch.randn(samples, 2, capacity + tokens, 32, generator=g)
    for length in (1, KV_BLOCK + 1, capacity):
        attention.update(torch.tensor([length]))
        got = attention(q, keys, values)
        want = prefix_reference(q, keys, values, length, capacity)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="built for 64 tokens over"):
        attention(q, keys[:, :, 1:], values[:, :, 1:])
    with pytest.raises(ValueError, match="prefix_len must be"):
        attention.update(torch.tensor([3, 4]))


def test_flex_prefix_refuses_other_shapes():
    attention = FlexPrefixAttention(200, 64, "cpu", compiled=False)
    q = torch.randn(1, 8, 64, 32)
    keys = torch.randn(1, 2, 200 + 64, 32)
    with pytest.raises(ValueError, match="built for 64 tokens over 256 \\+ 64 slots"):
        attention(q, keys, keys)
    with pytest.raises(ValueError, match="prefix_len must be"):
        attention.update(torch.tensor([3, 4]))


@needs_cuda
@pytest.mark.parametrize(("dtype", "tol"), [(torch.float32, 1e-4), (torch.bfloat16, 2e-2)])
def test_compiled_flex_on_cuda_matches_the_masked_attention(dtype, tol):
    capacity, t = 26 * KV_BLOCK, 9
    attention = FlexCacheAttention(capacity, t, "cuda", compiled=True)
    q, k, v = random_qkv(t, capacity, dtype, "cuda")
    for start in (100, KV_BLOCK * 10 - 4, capacity - t):
        attention.update(torch.arange(start, start + t, device="cuda"))
        got = attention(q, k, v)
        want = masked_reference(q.float(), k.float(), v.float(), start)
        torch.testing.assert_close(got.float(), want, atol=tol, rtol=tol)


def write_then_attend(q, k, v, slots, keys, values, attention):
    keys.index_copy_(2, slots, k)
    values.index_copy_(2, slots, v)
    return attention(q, keys, values)


@needs_cuda
@pytest.mark.parametrize("layer", [0, 1])
def test_a_compiled_cache_write_and_flex_under_a_cuda_graph_match_the_masked_attention(layer):
    """The cache of `layer` as the engine holds it: views of one allocation for all layers."""
    capacity = 32 * KV_BLOCK
    compiled = torch.compile(write_then_attend, fullgraph=True, dynamic=False)
    _, base_k, base_v = random_qkv(1, capacity, torch.float32, "cuda")
    cache_k = torch.zeros(2, *base_k.shape, device="cuda")  # [L, B, Hkv, C, D]
    cache_v = torch.zeros_like(cache_k)
    keys, values = cache_k[layer], cache_v[layer]
    for t in (8, 1, 9):
        attention = FlexCacheAttention(capacity, t, "cuda", compiled=True)
        q, k, v = (torch.zeros(1, heads, t, 32, device="cuda") for heads in (8, 2, 2))
        slots = torch.arange(t, device="cuda")

        def step():
            attention.update(slots)
            return compiled(q, k, v, slots, keys, values, attention)

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = step()
        for start in (100, 16 * KV_BLOCK - 3, capacity - t):
            keys.copy_(base_k)
            values.copy_(base_v)
            for x in (q, k, v):
                x.copy_(torch.randn_like(x))
            slots.copy_(torch.arange(start, start + t, device="cuda"))
            graph.replay()
            want_k, want_v = base_k.clone(), base_v.clone()
            want_k[:, :, start:start + t] = k
            want_v[:, :, start:start + t] = v
            torch.testing.assert_close(out, masked_reference(q, want_k, want_v, start),
                                       atol=1e-4, rtol=1e-4)


@needs_cuda
@pytest.mark.parametrize("flex", [{"verify_attention": "flex"}, {"action_attention": "flex"},
                                  {"verify_attention": "gemm", "action_attention": "gemm"}])
def test_engine_with_flex_under_cuda_graphs_plans_like_the_masked_engine(flex):
    from helpers.tiny_model import PROMPT_CORPUS as CORPUS
    from helpers.windows import window

    from flashdrive_ros.engine.engine import Engine
    from flashdrive_ros.model.alpamayo import AlpamayoModel
    from flashdrive_ros.model.tokenizer import build_tokenizer

    tok = build_tokenizer(CORPUS, vocab_size=4600)
    cfg = tiny(vocab_size=tok.vocab_size)
    torch.manual_seed(0)
    model = AlpamayoModel(cfg).eval().to("cuda")
    drafter = Drafter(cfg.drafter, cfg.text).eval().to("cuda")
    plans = {}
    for kind, changes in (("masked", {}), ("flex", flex)):
        engine = Engine(model, tok, drafter, EngineConfig(
            device="cuda", max_coc_tokens=12, **changes))
        plans[kind] = [engine.step(window(i)) for i in range(3)]
    for got, want in zip(plans["flex"], plans["masked"], strict=True):
        assert got.coc_token_ids == want.coc_token_ids
        assert got.accepted_lengths == want.accepted_lengths
        np.testing.assert_allclose(got.trajectories, want.trajectories, rtol=2e-4, atol=1e-3)
