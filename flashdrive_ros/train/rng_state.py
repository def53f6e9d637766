"""The process-wide random states (torch CPU and CUDA, numpy, random) as tensors + JSON."""

from __future__ import annotations

import random

import numpy as np
import torch


def rng_state(device: torch.device) -> tuple[dict[str, torch.Tensor], dict]:
    tensors = {"rng.torch": torch.get_rng_state()}
    if device.type == "cuda":
        tensors["rng.cuda"] = torch.cuda.get_rng_state(device)
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    return tensors, {"numpy": [name, keys.tolist(), pos, has_gauss, gauss],
                     "random": [version, list(internal), gauss_next]}


def restore_rng(tensors: dict[str, torch.Tensor], meta: dict, device: torch.device) -> None:
    torch.set_rng_state(tensors["rng.torch"])
    if device.type == "cuda":
        if "rng.cuda" not in tensors:
            raise ValueError("the checkpoint holds no CUDA random state (trained on the CPU)")
        torch.cuda.set_rng_state(tensors["rng.cuda"], device)
    name, keys, pos, has_gauss, gauss = meta["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
    version, internal, gauss_next = meta["random"]
    random.setstate((version, tuple(internal), gauss_next))
