import numpy as np
import pytest
import torch
from helpers.engines import FLOAT32_REORDER_ATOL_M
from helpers.tiny_model import tiny_parts

from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.engine.encoded_frames import EncodedFrames
from flashdrive_ros.engine.engine import Engine
from flashdrive_ros.engine.types import Window

VIEWS, FRAMES = 4, 4


def encoded(value: float):
    return torch.full((2, 3), value), [torch.full((2, 3), -value)]


def test_store_keeps_the_last_seconds_and_restarts_on_an_old_stamp():
    store = EncodedFrames(keep_s=1.0)
    store.put(0, 10.0, encoded(1.0))
    store.put(1, 10.0, encoded(2.0))
    assert float(store.get(1, 10.0)[0][0, 0]) == 2.0 and store.get(1, 10.1) is None
    store.put(0, 10.9, encoded(3.0))
    assert len(store) == 3
    store.put(0, 11.05, encoded(4.0))
    assert store.get(0, 10.0) is None and len(store) == 2
    store.put(0, 5.0, encoded(5.0))
    assert len(store) == 1 and store.get(0, 5.0) is not None
    store.clear()
    assert len(store) == 0
    with pytest.raises(ValueError, match="keep_s"):
        EncodedFrames(0.0)


@pytest.fixture(scope="module")
def parts():
    torch.set_num_threads(1)
    model, tok, _ = tiny_parts(["the car ahead brakes, so the ego vehicle slows down."] * 10)
    return model, tok


def camera_set(step: int) -> list[np.ndarray]:
    return [np.random.default_rng(100 * v + step).integers(0, 256, (48, 64, 3), dtype=np.uint8)
            for v in range(VIEWS)]


def window(step: int) -> Window:
    """Camera steps step .. step + FRAMES - 1, 0.1 s apart."""
    images = np.stack([np.stack([camera_set(step + f)[v] for f in range(FRAMES)])
                       for v in range(VIEWS)])
    stamps = np.tile(0.1 * (step + np.arange(FRAMES, dtype=np.float64)), (VIEWS, 1))
    history = np.zeros((16, 4))
    history[:, 0] = np.linspace(-4.5 - 0.3 * step, 0.0, 16)
    return Window(t0=float(stamps[0, -1]), images=images, image_stamps=stamps,
                  ego_history=history, speed=3.0, sequence=step)


def counting_engine(model, tok) -> tuple[Engine, list[int]]:
    engine = Engine(model, tok, None, EngineConfig(speculative=False, max_coc_tokens=4,
                                                   num_samples=2))
    images_encoded = []
    encoder = engine.backend.encoder

    def counted(patches, grid_thw):
        images_encoded.append(int(grid_thw.shape[0]))
        return encoder(patches, grid_thw)

    engine.backend.encoder = counted
    return engine, images_encoded


@pytest.mark.parametrize("steps", [(0, 1, 2), (0, 2, 7)])
def test_frames_encoded_ahead_give_the_plain_paths_plans(parts, steps):
    """Every camera set encoded ahead as it arrives: windows encode nothing themselves and
    plan as the engine that encodes its windows' frames (streaming k = 1, 2 and a full
    prefill)."""
    model, tok = parts
    plain, plain_encoded = counting_engine(model, tok)
    ahead, ahead_encoded = counting_engine(model, tok)
    ahead.keep_encoded_frames()
    arrived = -1
    for step in steps:
        for camera_step in range(max(arrived + 1, step), step + FRAMES):
            stamps = [0.1 * camera_step] * VIEWS
            ahead.encode_camera_set(stamps, camera_set(camera_step))
        arrived = step + FRAMES - 1
        encoded_before = len(ahead_encoded)
        a, b = plain.step(window(step)), ahead.step(window(step))
        assert len(ahead_encoded) == encoded_before
        assert a.full_prefill == b.full_prefill and a.coc_token_ids == b.coc_token_ids
        # frames encoded in other batches: equal up to float32 reordering
        np.testing.assert_allclose(b.trajectories, a.trajectories, rtol=0,
                                   atol=FLOAT32_REORDER_ATOL_M)
    assert set(ahead_encoded) == {VIEWS} and sum(plain_encoded) > 0


def test_window_encodes_and_keeps_frames_not_encoded_ahead(parts):
    model, tok = parts
    engine, images_encoded = counting_engine(model, tok)
    engine.keep_encoded_frames()
    engine.encode_camera_set([0.1 * 3] * VIEWS, camera_set(3))
    engine.step(window(0))
    assert images_encoded == [VIEWS, VIEWS * (FRAMES - 1)]
    assert len(engine.encoded_frames) == VIEWS * FRAMES
    engine.keep_encoded_frames(None)
    engine.step(window(1))
    assert images_encoded[-1] == VIEWS
    with pytest.raises(RuntimeError, match="keep_encoded_frames"):
        engine.encode_camera_set([0.5] * VIEWS, camera_set(5))
