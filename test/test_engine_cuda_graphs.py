"""CUDA graph replay of the engine's fixed-shape steps against the same steps run eagerly,
step by step and over whole `Engine.step` sequences, in float32 and bfloat16."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.windows import window

from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.engine.engine import Engine
from flashdrive_ros.engine.speculative import ProposalRequest
from flashdrive_ros.model.kv_cache import KVCache

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

MAX_COC = 12
TOLERANCE = {"float32": 1e-5, "bfloat16": 2e-2}
TRAJECTORY_TOLERANCE = {"float32": 1e-3, "bfloat16": 5e-2}


def _engine(parts, dtype: str, **changes) -> Engine:
    model, tok, drafter = parts
    torch_dtype = getattr(torch, dtype)
    return Engine(model.to("cuda", torch_dtype), tok, drafter.to("cuda", torch_dtype),
                  EngineConfig(device="cuda", dtype=dtype, max_coc_tokens=MAX_COC, **changes))


def _snapshot(cache: KVCache) -> tuple:
    k_rot = None if cache.k_rot is None else cache.k_rot.clone()
    return cache.k.clone(), cache.v.clone(), cache.positions.clone(), cache.length, k_rot


def _restore(cache: KVCache, state: tuple) -> None:
    cache.k.copy_(state[0])
    cache.v.copy_(state[1])
    cache.positions.copy_(state[2])
    cache.length = state[3]
    if state[4] is not None:
        cache.k_rot.copy_(state[4])


def _close(got: torch.Tensor, want: torch.Tensor, dtype: str) -> None:
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(got.float(), want.float(), rtol=tol, atol=tol)


@pytest.mark.parametrize("rotated_keys", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_each_graphed_step_replays_like_eager(parts, dtype, rotated_keys):
    eng = _engine(parts, dtype, cuda_graphs=False, rotated_keys=rotated_keys)
    eng.step(window(0))
    graphed, eager = eng.graphed_steps(), eng.graphed_steps(enabled=False)
    images = window(0).images
    with torch.no_grad():
        for frames in (tuple((v, 3) for v in range(4)),
                       tuple((v, f) for v in range(4) for f in range(4))):
            got, got_deepstack = graphed.encoder(images, frames)
            want, want_deepstack = eager.encoder(images, frames)
            _close(got, want, dtype)
            for a, b in zip(got_deepstack, want_deepstack, strict=True):
                _close(a, b, dtype)
        cache = eng.stream.cache
        cache.rollback(eng.frame_layout.prompt_length)
        start = _snapshot(cache)
        for tokens in ([7], list(range(10, 18)), [5, 6, 7]):
            for _ in range(2):
                _restore(cache, start)
                got = graphed.target.run_tokens(tokens, cache, 40)
                after = _snapshot(cache)
                _restore(cache, start)
                want = eager.target.run_tokens(tokens, cache, 40)
                _close(got.logits, want.logits, dtype)
                _close(got.features, want.features, dtype)
                _close(after[0], cache.k, dtype)
                _close(after[1], cache.v, dtype)
                assert torch.equal(after[2], cache.positions) and after[3] == cache.length
                if cache.k_rot is not None:
                    _close(after[4], cache.k_rot, dtype)
        block = graphed.target.run_tokens(list(range(20, 28)), cache, 50)
        slots = torch.arange(cache.length - 8, cache.length, device="cuda")
        request = ProposalRequest(27, [27], block.features, slots, cache.positions[:, :, slots],
                                  cache.length, 58, None, None)
        drafts = graphed.proposer.propose(request).tokens
        assert torch.equal(drafts, eager.proposer.propose(request).tokens)
        assert drafts.shape == (eng.drafter.cfg.block_size - 1,)
        x0 = torch.randn(3, 64, 2, device="cuda", dtype=eng.dtype)
        _close(graphed.flow(x0, cache.length), eager.flow(x0, cache.length), dtype)
    assert graphed.encoder.step.captured_shapes == 2
    assert graphed.target.step.captured_shapes == 3
    assert graphed.proposer.step.captured_shapes == 1
    assert graphed.flow.step.captured_shapes == 1
    assert eager.captured_graphs == 0


@pytest.mark.parametrize("rotated_keys", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_engine_steps_with_graphs_match_eager(parts, dtype, rotated_keys):
    graphed = _engine(parts, dtype, num_samples=2, cuda_graphs=True, rotated_keys=rotated_keys)
    eager = _engine(parts, dtype, num_samples=2, cuda_graphs=True, rotated_keys=rotated_keys)
    eager.graphs = eager.graphed_steps(enabled=False)
    plain = _engine(parts, dtype, num_samples=2, cuda_graphs=False, rotated_keys=rotated_keys)
    assert plain.graphs is None
    for step in (0, 1, 2, 3, 5, 6, 7):
        a, b, c = graphed.step(window(step)), eager.step(window(step)), plain.step(window(step))
        assert a.coc_token_ids == b.coc_token_ids and a.accepted_lengths == b.accepted_lengths
        assert a.full_prefill == b.full_prefill == c.full_prefill
        np.testing.assert_allclose(a.trajectories, b.trajectories, rtol=0,
                                   atol=TRAJECTORY_TOLERANCE[dtype])
        if dtype == "float32":
            assert a.coc_token_ids == c.coc_token_ids
    # One graph per fixed shape, none per window (the cache length changes every window);
    # the encoder sees the whole window, one new frame per view and two (window 3 -> 5).
    steps = graphed.graphs
    assert steps.encoder.step.captured_shapes == 3
    assert steps.proposer.step.captured_shapes == 1
    assert steps.flow.step.captured_shapes == 1
    assert steps.target.step.captured_shapes <= 3
    assert eager.graphs.captured_graphs == 0
