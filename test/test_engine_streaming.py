import numpy as np
import pytest
import torch
from helpers.streaming import (
    FRAMES,
    VIEWS,
    make_vlm,
    new_state,
    prefill_window,
    prompt,
    window_inputs,
)

from flashdrive_ros.engine.streaming import FrameLayout, StreamingKVCache, frame_shift
from flashdrive_ros.model.kv_cache import KVCache

pytestmark = pytest.mark.usefixtures("one_thread")


def full_reference(vlm, cfg, step):
    """(state, prefill output) of a full prefill of window `step`."""
    state = new_state(cfg, streaming=False)
    _, out, _, _ = prefill_window(vlm, cfg, state, step)
    return state, out


def test_first_streaming_window_equals_full_prefill(tiny_vlm):
    vlm, cfg = tiny_vlm
    state = new_state(cfg)
    plan, out, layout, positions = prefill_window(vlm, cfg, state, 0)
    assert plan.full and plan.reason == "first window"
    ref_state, ref_out = full_reference(vlm, cfg, 0)
    assert torch.equal(out.logits, ref_out.logits)
    n = layout.prompt_length
    assert state.cache.length == ref_state.cache.length == n
    assert torch.equal(state.cache.k[..., :n, :], ref_state.cache.k[..., :n, :])
    assert torch.equal(state.cache.v[..., :n, :], ref_state.cache.v[..., :n, :])
    assert torch.equal(state.cache.positions[:, :, :n], positions)


STEPS_BY_SHIFT = {1: (0, 1, 2, 3, 4), 2: (0, 2, 4, 6), 3: (0, 3, 6, 9), 4: (0, 4, 8),
                  6: (0, 6, 12)}


@pytest.mark.parametrize("shift", sorted(STEPS_BY_SHIFT))
@pytest.mark.parametrize("layers", [1, 2])
def test_streaming_matches_full_prefill_where_it_must(layers, shift):
    """Windows `shift` frames apart. Layer-0 keys/values depend on the token alone, so the
    streamed cache must hold exactly the full prefill's layer-0 entries (permuted into ring
    slots); the recomputed tokens attend over them through the streaming mask, so their
    layer-1 entries and, for one layer, the logits must match the full prefill too. A shift
    of FRAMES or more shares no frame: a full prefill."""
    vlm, cfg = make_vlm(layers)
    state = new_state(cfg)
    for index, step in enumerate(STEPS_BY_SHIFT[shift]):
        plan, out, layout, _ = prefill_window(vlm, cfg, state, step)
        streamed = index > 0 and shift < FRAMES
        assert plan.full == (not streamed)
        new = shift if streamed else FRAMES
        assert plan.new_frames == new
        assert plan.frames_to_encode == tuple((v, f) for v in range(VIEWS)
                                              for f in range(FRAMES - new, FRAMES))
        ref_state, ref_out = full_reference(vlm, cfg, step)
        n = layout.prompt_length
        slot_of = layout.slot_of_prompt_index(plan.shift)
        for cache_part in ("k", "v"):
            ours, ref = getattr(state.cache, cache_part), getattr(ref_state.cache, cache_part)
            torch.testing.assert_close(ours[0, :, :, slot_of], ref[0, :, :, :n],
                                       rtol=1e-5, atol=1e-5)
            if layers == 2:
                torch.testing.assert_close(ours[1, :, :, plan.query_slots],
                                           ref[1, :, :, plan.query_order], rtol=1e-5, atol=1e-5)
        if layers == 1:
            torch.testing.assert_close(out.logits, ref_out.logits, rtol=1e-5, atol=1e-5)
            assert int(out.logits.argmax()) == int(ref_out.logits.argmax())


@pytest.mark.parametrize("previous_step,step,expected", [
    (0, 1, 1), (0, 2, 2), (0, 3, 3), (0, 4, 4), (0, 9, 4), (3, 3, None), (3, 1, None)])
def test_frame_shift_by_stamp(previous_step, step, expected):
    shift = frame_shift(window_inputs(previous_step)[1], window_inputs(step)[1])
    assert shift == expected


def test_frame_shift_needs_every_view_to_move_alike():
    previous, stamps = window_inputs(0)[1], window_inputs(2)[1]
    stamps[1] = window_inputs(1)[1][1]
    assert frame_shift(previous, stamps) is None
    assert frame_shift(previous, stamps[:, 1:]) is None


def test_cache_holds_expected_frames_at_expected_positions(tiny_vlm):
    vlm, cfg = tiny_vlm
    state = new_state(cfg)
    steps = (0, 1, 3, 4, 7)
    for step in steps:
        plan, out, layout, positions = prefill_window(vlm, cfg, state, step)
    assert not plan.full and plan.shift == (1 + 2 + 1 + 3) % FRAMES
    assert state.windows_since_full == len(steps) - 1
    assert plan.frames_to_encode == tuple((v, f) for v in range(VIEWS)
                                          for f in range(1, FRAMES))
    block = layout.block_spans[0][0][1] - layout.block_spans[0][0][0]
    tail = layout.prompt_length - layout.tail_start
    assert plan.query_order.shape[0] == VIEWS * 3 * block + tail
    ref_state, ref_out = full_reference(vlm, cfg, steps[-1])
    n = layout.prompt_length
    slot_of = layout.slot_of_prompt_index(plan.shift)
    for v in range(VIEWS):
        for f in range(FRAMES):
            ring = layout.image_spans[v][(f + plan.shift) % FRAMES]
            image = layout.image_spans[v][f]
            assert slot_of[image[0]:image[1]].tolist() == list(range(*ring))
            torch.testing.assert_close(state.cache.k[0, :, :, ring[0]:ring[1]],
                                       ref_state.cache.k[0, :, :, image[0]:image[1]],
                                       rtol=1e-5, atol=1e-5)
            assert torch.equal(state.cache.positions[:, :, ring[0]:ring[1]],
                               positions[:, :, image[0]:image[1]])
    assert torch.equal(state.cache.positions[:, :, slot_of], positions)
    assert torch.equal(ref_state.cache.positions[:, :, :n], positions)
    assert state.cache.length == n
    # Deeper layers carry the streaming approximation: cached frames saw an older context.
    assert not torch.allclose(out.logits, ref_out.logits, atol=1e-4)


def test_full_recompute_mode_recomputes_every_window(tiny_vlm):
    vlm, cfg = tiny_vlm
    state = new_state(cfg, streaming=False)
    for step in range(3):
        plan, out, layout, _ = prefill_window(vlm, cfg, state, step)
        assert plan.full and plan.reason == "streaming off"
        assert len(plan.frames_to_encode) == VIEWS * FRAMES
        ref_state, ref_out = full_reference(vlm, cfg, step)
        assert torch.equal(out.logits, ref_out.logits)
        assert torch.equal(state.cache.k, ref_state.cache.k)


def test_full_prefill_triggers(tiny_vlm):
    vlm, cfg = tiny_vlm
    state = new_state(cfg)
    assert prefill_window(vlm, cfg, state, 0)[0].full
    assert not prefill_window(vlm, cfg, state, 1)[0].full
    plan = prefill_window(vlm, cfg, state, 3)[0]
    assert not plan.full and plan.new_frames == 2
    plan = prefill_window(vlm, cfg, state, 7)[0]
    assert plan.full and plan.reason == "no frame shared with the previous window"
    plan = prefill_window(vlm, cfg, state, 7)[0]
    assert plan.full and plan.reason == "frames are not the previous window's shifted"
    plan = prefill_window(vlm, cfg, state, 4)[0]
    assert plan.full and plan.reason == "frames are not the previous window's shifted"
    plan = prefill_window(vlm, cfg, state, 5, time_base_reset=True)[0]
    assert plan.full and plan.reason == "time base reset"
    assert not prefill_window(vlm, cfg, state, 6)[0].full
    state.reset()
    assert prefill_window(vlm, cfg, state, 8)[0].reason == "first window"
    images, stamps = window_inputs(9)
    ids, layout = prompt(9, cfg.tokens_per_image)
    state.plan(layout, ids, stamps)
    plan = prefill_window(vlm, cfg, state, 9)[0]
    assert plan.full and plan.reason == "previous prefill did not finish"
    ids, layout = prompt(10, cfg.tokens_per_image)
    ids[0] = 13
    plan = state.plan(layout, ids, window_inputs(10)[1])
    assert plan.full and plan.reason == "prompt before the tail changed"


def test_bad_layouts_and_inputs_raise(tiny_vlm):
    vlm, cfg = tiny_vlm
    with pytest.raises(ValueError, match="same non-zero token count"):
        FrameLayout((((0, 3), (3, 5)),), (((1, 3), (4, 5)),), 5, 7)
    with pytest.raises(ValueError, match="ordered and disjoint"):
        FrameLayout((((0, 3), (2, 5)),), (((1, 2), (3, 4)),), 5, 7)
    with pytest.raises(ValueError, match="tail_start"):
        FrameLayout((((0, 3),),), (((1, 2),),), 2, 7)
    with pytest.raises(ValueError, match="contiguous run"):
        FrameLayout.from_token_ids([1, 9, 2, 9], 9, [[(0, 4)]], 4)
    state = new_state(cfg)
    ids, layout = prompt(0, cfg.tokens_per_image)
    with pytest.raises(ValueError, match="stamps"):
        state.plan(layout, ids, np.zeros((VIEWS, FRAMES + 1)))
    plan = state.plan(layout, ids, window_inputs(0)[1])
    with pytest.raises(RuntimeError, match="begin"):
        state.attention_mask(plan)
    with pytest.raises(ValueError, match="positions"):
        state.begin(plan, torch.zeros(3, 1, 5, dtype=torch.long))
    with pytest.raises(RuntimeError, match="begun"):
        state.finish(plan)
    small = StreamingKVCache(KVCache(4, 1, 2, 16, 32))
    with pytest.raises(ValueError, match="capacity"):
        small.plan(layout, ids, window_inputs(0)[1])
