import dataclasses

import numpy as np
import pytest

from flashdrive_ros.model.config import tiny
from flashdrive_ros.model.history import HistoryTokenizer
from flashdrive_ros.model.prompt import PromptBuilder
from flashdrive_ros.model.tokenizer import build_tokenizer

CORPUS = ["Front camera: frame 0 the car ahead brakes, so the ego vehicle slows down.",
          "output the chain-of-thought reasoning of the driving process, then output the "
          "future trajectory. You are a driving assistant that generates safe and accurate "
          "actions."] * 10


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer(CORPUS, vocab_size=4600)


def _cfg(layout: str, tok):
    cfg = tiny(vocab_size=tok.vocab_size)
    return dataclasses.replace(cfg, prompt=dataclasses.replace(cfg.prompt, layout=layout))


def _expected_text(cfg, names):
    n = cfg.tokens_per_image
    parts = ["<|im_start|>system\nYou are a driving assistant that generates safe and accurate "
             "actions.<|im_end|>\n<|im_start|>user\n"]
    for cam, name in enumerate(names):
        for f in range(cfg.prompt.num_frames):
            if cfg.prompt.layout == "alpamayo-1.5":
                parts.append((f"{name}: " if f == 0 else "") + f"frame {f} ")
            parts.append("<|vision_start|>" + "<|image_pad|>" * n + "<|vision_end|>")
    parts.append("<|traj_history_start|>" + "<|traj_history|>" * 48 + "<|traj_history_end|>"
                 "output the chain-of-thought reasoning of the driving process, then output "
                 "the future trajectory.<|im_end|>\n<|im_start|>assistant\n<|cot_start|>")
    return "".join(parts)


@pytest.mark.parametrize("layout", ["alpamayo-1", "alpamayo-1.5"])
def test_ids_equal_whole_string_encoding_and_spans_tile_the_prompt(tok, layout):
    cfg = _cfg(layout, tok)
    builder = PromptBuilder(cfg, tok)
    prompt = builder.build()
    ids, lay = prompt.token_ids, prompt.layout
    names = ["Front left camera", "Front camera", "Front right camera",
             "Front telephoto camera"]
    assert ids == tok.encode(_expected_text(cfg, names))
    assert lay.prefix.start == 0 and lay.length == len(ids)
    assert len(lay.images) == 4 and all(len(row) == 4 for row in lay.images)
    cursor = lay.prefix.stop
    vs, ve, pad = (tok.token_id(s) for s in ("<|vision_start|>", "<|vision_end|>",
                                             "<|image_pad|>"))
    for cam, row in enumerate(lay.images):
        for frame, span in enumerate(row):
            assert (span.camera, span.frame) == (cam, frame)
            assert span.block.start == cursor == span.text.start
            assert span.text.stop == span.pads.start - 1 and ids[span.text.stop] == vs
            assert len(span.pads) == cfg.tokens_per_image
            assert all(ids[i] == pad for i in span.pads) and ids[span.pads.stop] == ve
            label = tok.decode(ids[span.text.start:span.text.stop])
            if layout == "alpamayo-1":
                assert label == ""
            else:
                assert label == (f"{names[cam]}: " if frame == 0 else "") + f"frame {frame} "
            cursor = span.block.stop
    assert lay.tail.start == cursor and lay.tail.stop == len(ids)
    assert ids[lay.history.start - 1] == tok.token_id("traj_history_start")
    assert ids[lay.history.stop] == tok.token_id("traj_history_end")
    assert lay.history.start > lay.tail.start and ids[-1] == tok.token_id("cot_start")


def test_history_ids_are_placed_and_validated(tok):
    cfg = _cfg("alpamayo-1.5", tok)
    builder = PromptBuilder(cfg, tok)
    hist = HistoryTokenizer(cfg.action, tok.traj_token_start)
    t = np.arange(-15, 1)[:, None] * 0.1
    hist_ids = hist.encode(np.concatenate([3 * t, 0 * t, 0 * t], axis=1))
    prompt = builder.build(hist_ids)
    h = prompt.layout.history
    assert prompt.token_ids[h.start:h.stop] == hist_ids.tolist()
    placeholder = builder.build().token_ids
    assert prompt.token_ids[:h.start] == placeholder[:h.start]
    assert prompt.token_ids[h.stop:] == placeholder[h.stop:]
    with pytest.raises(ValueError, match="48"):
        builder.build(hist_ids[:10])
    with pytest.raises(ValueError, match="vocabulary"):
        builder.build([10**7] * 48)


def test_unknown_camera_gets_slot_label(tok):
    cfg = _cfg("alpamayo-1.5", tok)
    cfg = dataclasses.replace(cfg, prompt=dataclasses.replace(
        cfg.prompt, camera_names=("left_cam", "camera_front_wide_120fov"), num_frames=2))
    lay = PromptBuilder(cfg, tok).layout
    ids = PromptBuilder(cfg, tok).build().token_ids
    first = lay.images[0][0].text
    assert tok.decode(ids[first.start:first.stop]) == "Camera 0: frame 0 "
    assert len(lay.images) == 2 and len(lay.images[1]) == 2
