"""A window's shapes checked against the model it goes to: cameras, frames, history length,
image size and aspect ratio."""

from __future__ import annotations

import math

from flashdrive_ros.engine.types import Window
from flashdrive_ros.model.config import ModelConfig

MAX_ASPECT_DISTORTION = 0.2


def check_window_shape(window: Window, cfg: ModelConfig) -> None:
    """Raises ValueError where `window` does not fit a model of `cfg`."""
    p, a = cfg.prompt, cfg.action
    cams, frames, height, width, _ = window.images.shape
    if cams != len(p.camera_names) or frames != p.num_frames:
        raise ValueError(f"window has {cams} cameras x {frames} frames, the model takes "
                         f"{len(p.camera_names)} cameras x {p.num_frames} frames")
    if window.ego_history.shape[0] != a.num_history:
        raise ValueError(f"window ego_history has {window.ego_history.shape[0]} poses, the "
                         f"model takes {a.num_history}")
    unit = cfg.vision.patch_size * cfg.vision.spatial_merge_size
    distortion = abs(math.log((width / max(height, 1)) / (p.image_width / p.image_height)))
    if height < unit or width < unit or distortion > math.log1p(MAX_ASPECT_DISTORTION):
        raise ValueError(f"window images are {width}x{height}; the model resizes to "
                         f"{p.image_width}x{p.image_height} and accepts images at least "
                         f"{unit} px per side within {MAX_ASPECT_DISTORTION:.0%} of that "
                         f"aspect ratio")
