"""Camera frames -> Qwen3-VL vision patches: fit size, resize, normalize, patchify."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from flashdrive_ros.model.config import VisionConfig

IMAGE_MEAN = (0.5, 0.5, 0.5)
IMAGE_STD = (0.5, 0.5, 0.5)
DEFAULT_MIN_PIXELS = 256 * 256
DEFAULT_MAX_PIXELS = 4096 * 4096


def fit_image_size(height: int, width: int, factor: int, min_pixels: int = DEFAULT_MIN_PIXELS,
                   max_pixels: int = DEFAULT_MAX_PIXELS) -> tuple[int, int]:
    """(height, width) rounded to multiples of `factor` with height*width in [min, max] pixels.

    Same rule as Qwen-VL's `smart_resize`: round each side to the nearest multiple, then scale
    both sides down (floor) or up (ceil) by one factor keeping the aspect ratio.
    """
    if height <= 0 or width <= 0:
        raise ValueError(f"image size must be positive, got {height}x{width}")
    if factor <= 0 or min_pixels > max_pixels:
        raise ValueError(f"bad fit parameters: factor={factor}, min_pixels={min_pixels}, "
                         f"max_pixels={max_pixels}")
    if max(height, width) / min(height, width) > 200:
        raise ValueError(f"aspect ratio of {height}x{width} exceeds 200")
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def resize_images(images: np.ndarray, size: tuple[int, int],
                  device: torch.device | str | None = None) -> torch.Tensor:
    """images: uint8 [N, H, W, 3] -> float32 [N, 3, h, w] on the 0..255 scale.

    Antialiased bicubic on float values, neither rounded nor clamped, as the Alpamayo
    pipeline resizes float frames. The uint8 frames move to `device` first, so the resize
    runs there.
    """
    _check_images(images)
    height, width = size
    pixels = torch.from_numpy(np.ascontiguousarray(images)).to(device)
    pixels = pixels.permute(0, 3, 1, 2).float()
    if pixels.shape[-2:] == (height, width):
        return pixels
    return F.interpolate(pixels, size=(height, width), mode="bicubic", align_corners=False,
                         antialias=True)


def normalize(pixels: torch.Tensor) -> torch.Tensor:
    """pixels: [N, 3, h, w] in [0, 255] -> (x / 255 - mean) / std."""
    mean = torch.tensor(IMAGE_MEAN, dtype=pixels.dtype, device=pixels.device).view(1, 3, 1, 1)
    std = torch.tensor(IMAGE_STD, dtype=pixels.dtype, device=pixels.device).view(1, 3, 1, 1)
    return (pixels / 255.0 - mean) / std


def patchify(pixels: torch.Tensor, cfg: VisionConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """pixels: [N, C, h, w] normalized stills -> (patches [N*gh*gw, C*Tp*P*P], grid_thw [N, 3]).

    Patches of an image are ordered by merge block (block row, block col, row in block,
    col in block); each patch is (C, Tp, P, P) with the still frame repeated over Tp.
    """
    n, channels, height, width = pixels.shape
    p, m, tp = cfg.patch_size, cfg.spatial_merge_size, cfg.temporal_patch_size
    if channels != cfg.in_channels:
        raise ValueError(f"expected {cfg.in_channels} channels, got {channels}")
    if height % (p * m) or width % (p * m):
        raise ValueError(f"image size {height}x{width} is not a multiple of patch*merge = {p * m}")
    gh, gw = height // p, width // p
    x = pixels.reshape(n, channels, gh // m, m, p, gw // m, m, p)
    x = x.permute(0, 2, 5, 3, 6, 1, 4, 7)  # x: [N, gh/m, gw/m, m, m, C, P, P]
    x = x.unsqueeze(6).expand(*x.shape[:6], tp, p, p)  # x: [N, gh/m, gw/m, m, m, C, Tp, P, P]
    patches = x.reshape(n * gh * gw, channels * tp * p * p)
    grid_thw = torch.tensor([[1, gh, gw]] * n, dtype=torch.long, device="cpu").reshape(n, 3)
    return patches, grid_thw


def preprocess_images(images: np.ndarray, cfg: VisionConfig, size: tuple[int, int],
                      device: torch.device | str | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """images: uint8 [N, H, W, 3] RGB; size: (height, width), a multiple of patch*merge.

    Returns (pixel_patches [N_patches, C*Tp*P*P] float32 on `device` (default CPU),
    grid_thw [N, 3] long on the CPU).
    """
    _check_images(images)
    unit = cfg.patch_size * cfg.spatial_merge_size
    height, width = size
    if height <= 0 or width <= 0 or height % unit or width % unit:
        raise ValueError(f"target size {height}x{width} must be a positive multiple of "
                         f"patch*merge = {unit}")
    return patchify(normalize(resize_images(images, (height, width), device)), cfg)


def _check_images(images: np.ndarray) -> None:
    if not isinstance(images, np.ndarray):
        raise TypeError(f"images must be a numpy array, got {type(images).__name__}")
    if images.dtype != np.uint8:
        raise TypeError(f"images must be uint8, got {images.dtype}")
    if images.ndim != 4 or images.shape[-1] != 3:
        raise ValueError(f"images must be [N, H, W, 3] RGB, got shape {images.shape}")
    if images.shape[0] == 0 or images.shape[1] == 0 or images.shape[2] == 0:
        raise ValueError(f"empty image batch {images.shape}")
