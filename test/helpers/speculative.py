"""A tiny target over random prompts, decoded greedily or through a proposer, for the
speculative decoding tests."""

import dataclasses

import torch

from flashdrive_ros.engine.decoding import (
    StopRule,
    Target,
    greedy_decode,
    prefill,
    required_capacity,
)
from flashdrive_ros.engine.speculative import DFlashProposer, speculative_decode
from flashdrive_ros.model.config import tiny
from flashdrive_ros.model.drafter import Drafter
from flashdrive_ros.model.kv_cache import KVCache
from flashdrive_ros.model.positions import image_positions, text_positions
from flashdrive_ros.model.vlm import VLM

CFG = tiny(vocab_size=512)
MAX_NEW = 20
UNREACHABLE = StopRule(cot_end_id=510, traj_future_start_id=511, max_new_tokens=MAX_NEW)
SEEDS = range(50)


def tiny_target() -> Target:
    torch.manual_seed(0)
    vlm = VLM(CFG.vision, CFG.text).eval()
    return Target(vlm.language_model, vlm.lm_head, CFG.drafter.target_layer_ids)


def drafter_proposer(target: Target, rotary: str = "flat", seed: int = 1) -> DFlashProposer:
    torch.manual_seed(seed)
    cfg = dataclasses.replace(CFG.drafter, rotary=rotary)
    drafter = Drafter(cfg, CFG.text).eval()
    return DFlashProposer(drafter, target.embed_tokens, target.lm_head)


def random_prompt(target: Target, seed: int):
    """Random text, an image-like run with 3D positions, more text: embeds [1, T, H],
    positions [3, 1, T], ids [T]."""
    g = torch.Generator().manual_seed(seed)
    a = int(torch.randint(2, 8, (), generator=g))
    tail = int(torch.randint(3, 10, (), generator=g))
    img = image_positions(a, (1, 4, 6), 2)[:, None]  # [3, 1, 6], max a + 2
    positions = torch.cat([text_positions(0, a), img, text_positions(a + 3, tail)], dim=2)
    ids = torch.randint(0, 500, (positions.shape[2],), generator=g)
    with torch.no_grad():
        embeds = target.embed_tokens(ids[None])
    return embeds, positions, ids


def run_decode(target: Target, seed: int, stop: StopRule, proposer=None, context_len: int = 8,
               sampling=None, generator=None):
    """(decode result, cache, positions) of prompt `seed`: greedy without a proposer."""
    embeds, positions, ids = random_prompt(target, seed)
    cap = required_capacity(positions.shape[2], stop, 16)
    cache = KVCache(CFG.text.num_hidden_layers, 1, CFG.text.num_key_value_heads, cap,
                    CFG.text.head_dim, dtype=torch.float32)
    with torch.no_grad():
        out = prefill(target, embeds, positions, cache, context_len=context_len, token_ids=ids)
    if proposer is None:
        result = greedy_decode(target, out, cache, stop)
    else:
        result = speculative_decode(target, proposer, out, cache, stop, sampling, generator)
    return result, cache, positions


def assert_same_cache(a: KVCache, b: KVCache) -> None:
    assert a.length == b.length
    n = a.length
    torch.testing.assert_close(a.k[:, :, :, :n], b.k[:, :, :, :n], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a.v[:, :, :, :n], b.v[:, :, :, :n], atol=1e-5, rtol=1e-5)
    assert torch.equal(a.positions[:, :, :n], b.positions[:, :, :n])


def stop_for(target: Target, seed: int) -> StopRule:
    """Odd seeds stop at a <|cot_end|> that greedy decoding really emits."""
    if seed % 2 == 0:
        return UNREACHABLE
    reference, _, _ = run_decode(target, seed, UNREACHABLE)
    k = (2 + seed % 12) % (len(reference.tokens) - 2)
    cot_end = reference.tokens[k]
    tfs = (cot_end + 1) % 500
    return StopRule(cot_end, tfs, MAX_NEW)
