"""Engine input windows of random camera frames."""

import numpy as np

from flashdrive_ros.engine.engine import Engine
from flashdrive_ros.engine.types import Window


def window(step: int, cams: int = 4, frames: int = 4, size=(48, 64)) -> Window:
    """Window `step` holds camera steps step .. step + frames - 1, 0.1 s apart."""
    images = np.stack([np.stack([
        np.random.default_rng(100 * c + step + f).integers(0, 256, (*size, 3), dtype=np.uint8)
        for f in range(frames)]) for c in range(cams)])
    stamps = np.tile(0.1 * (step + np.arange(frames, dtype=np.float64)), (cams, 1))
    history = np.zeros((16, 4))
    history[:, 0] = np.linspace(-4.5 - 0.3 * step, 0.0, 16)
    return Window(t0=float(stamps[0, -1]), images=images, image_stamps=stamps,
                  ego_history=history, speed=3.0, sequence=step)


def sliding_windows(engine: Engine, count: int) -> list[Window]:
    """`count` consecutive windows at the engine model's image size, one frame apart."""
    p, a = engine.model.cfg.prompt, engine.model.cfg.action
    rng = np.random.default_rng(0)
    shape = (len(p.camera_names), p.num_frames + count, p.image_height, p.image_width, 3)
    frames = rng.integers(0, 256, size=shape, dtype=np.uint8)
    history = np.cumsum(np.tile([[0.5, 0.0, 0.0, 0.0]], (a.num_history, 1)), axis=0)
    windows = []
    for n in range(count):
        stamps = p.frame_dt * (n + np.arange(p.num_frames, dtype=np.float64))
        windows.append(Window(t0=float(stamps[-1]), images=frames[:, n:n + p.num_frames],
                              image_stamps=np.tile(stamps, (shape[0], 1)),
                              ego_history=history, sequence=n))
    return windows
