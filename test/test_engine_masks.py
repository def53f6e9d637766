import pytest
import torch

from flashdrive_ros.engine.masks import is_plain_causal, prompt_order_causal_mask, slot_mask
from flashdrive_ros.engine.streaming import FrameLayout

PREFIX, LABEL, IMAGE, TAIL = 2, 1, 2, 3
VIEWS, FRAMES = 3, 3


def small_layout() -> FrameLayout:
    blocks, images = [], []
    start = PREFIX
    for _ in range(VIEWS):
        row_b, row_i = [], []
        for _ in range(FRAMES):
            row_b.append((start, start + LABEL + IMAGE))
            row_i.append((start + LABEL, start + LABEL + IMAGE))
            start += LABEL + IMAGE
        blocks.append(tuple(row_b))
        images.append(tuple(row_i))
    return FrameLayout(tuple(blocks), tuple(images), start, start + TAIL)


def where(layout: FrameLayout, index: int):
    """('prefix'|'tail', None, None) or ('frame', view, frame) of a prompt index."""
    if index < PREFIX:
        return "prefix", None, None
    if index >= layout.tail_start:
        return "tail", None, None
    for v, row in enumerate(layout.block_spans):
        for f, (start, end) in enumerate(row):
            if start <= index < end:
                return "frame", v, f
    raise AssertionError(index)


def expected_allowed(layout: FrameLayout, query: int, key: int, new_frames: int) -> bool:
    q_kind, q_view, _ = where(layout, query)
    k_kind, k_view, k_frame = where(layout, key)
    if q_kind == "tail":
        return key <= query
    if k_kind == "prefix":
        return True
    if k_kind == "tail":
        return False
    if k_view < q_view:
        return True
    if k_view > q_view:
        return False
    return k_frame < FRAMES - new_frames or key <= query


@pytest.mark.parametrize("new_frames", [1, 2])
@pytest.mark.parametrize("shift", [0, 1, 2, 4])
def test_streaming_mask_follows_the_flashdrive_rules(shift, new_frames):
    layout = small_layout()
    slot_of = layout.slot_of_prompt_index(shift)
    slot_order = torch.empty(layout.prompt_length + 5, dtype=torch.long)
    slot_order[slot_of] = torch.arange(layout.prompt_length)
    slot_order[layout.prompt_length:] = torch.arange(layout.prompt_length,
                                                     layout.prompt_length + 5)
    queries = layout.newest_frames_and_tail(new_frames)
    assert len(queries) == VIEWS * new_frames * (LABEL + IMAGE) + TAIL
    mask = slot_mask(slot_order, slot_of[queries], layout.prompt_length)
    assert mask.shape == (1, 1, len(queries), layout.prompt_length)
    for qi, query in enumerate(queries.tolist()):
        for slot in range(layout.prompt_length):
            key = int(slot_order[slot])
            assert bool(mask[0, 0, qi, slot]) == expected_allowed(layout, query, key,
                                                                  new_frames), (query, key, slot)


def test_new_frames_sit_in_the_ring_range_of_the_dropped_frame():
    layout = small_layout()
    for shift in range(1, 5):
        slot_of = layout.slot_of_prompt_index(shift)
        assert sorted(slot_of.tolist()) == list(range(layout.prompt_length))
        for v in range(VIEWS):
            newest = layout.image_spans[v][FRAMES - 1]
            ring = layout.image_spans[v][(FRAMES - 1 + shift) % FRAMES]
            assert slot_of[newest[0]:newest[1]].tolist() == list(range(*ring))
            label = layout.block_spans[v][FRAMES - 1][0]
            assert int(slot_of[label]) == label
        tail = torch.arange(layout.tail_start, layout.prompt_length)
        assert torch.equal(slot_of[tail], tail)


def test_identity_order_is_plain_causal():
    order = torch.arange(10)
    assert is_plain_causal(order, 10)
    mask = slot_mask(order, torch.arange(4, 10), 10)
    causal = torch.arange(10)[None, :] <= torch.arange(4, 10)[:, None]
    assert torch.equal(mask[0, 0], causal)
    assert not is_plain_causal(torch.tensor([1, 0, 2]), 3)


def test_new_frame_count_must_leave_a_kept_frame():
    layout = small_layout()
    for frames in (0, FRAMES):
        with pytest.raises(ValueError, match="new frames per view"):
            layout.newest_frames_and_tail(frames)


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="1D"):
        prompt_order_causal_mask(torch.zeros(2, 2, dtype=torch.long), torch.arange(3))
    with pytest.raises(ValueError, match="own key"):
        slot_mask(torch.arange(10), torch.tensor([9]), 5)
    with pytest.raises(ValueError, match="covers"):
        slot_mask(torch.arange(4), torch.tensor([1]), 6)
