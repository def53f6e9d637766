"""Engines over the in-memory tiny model (the `parts` fixture) and their plans of the test
windows."""

import torch

from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.engine.engine import Engine
from helpers.windows import window

MAX_COC = 6
# Two float32 paths that feed the same tokens through other call shapes (other verify-round
# splits, other encoder batch sizes) run GEMMs of other sizes; MKL may then block their
# reductions differently (seen with AVX-512/AMX kernels on Xeon), which moves keys, values
# and embeddings by about float32 rounding (2**-24 relative). The random tiny expert and
# the unicycle integration over 64 waypoints (up to ~32 m) amplify that: a 2**-24 relative
# perturbation of every backbone attention or linear output moved trajectories by at most
# 5e-3 m (4 windows x 6 draws). 2e-2 m leaves a 4x margin and is still far below what a
# wrong token, cache slot or noise draw changes (meters).
FLOAT32_REORDER_ATOL_M = 2e-2


def engine(parts, **changes) -> Engine:
    model, tok, drafter = parts
    return Engine(model, tok, drafter, EngineConfig(max_coc_tokens=MAX_COC, **changes))


def run(eng: Engine, steps=(0, 1)):
    return [eng.step(window(s)) for s in steps]


def plans_with_switch(parts, switch: str, steps=(0, 1, 2)) -> dict[bool, tuple[Engine, list]]:
    """{on/off: (engine, its plans of windows `steps`)} with only `switch` changed (2
    samples)."""
    out = {}
    for value in (True, False):
        eng = engine(parts, num_samples=2, **{switch: value})
        out[value] = (eng, run(eng, steps))
    return out


def cuda_float32_engines(parts, switch: str) -> list[Engine]:
    """[plain, `switch` on]: engines of the tiny model moved to CUDA in float32 (2 samples,
    up to 12 CoC tokens)."""
    model, tok, drafter = parts
    model, drafter = model.to("cuda", torch.float32), drafter.to("cuda", torch.float32)
    return [Engine(model, tok, drafter,
                   EngineConfig(device="cuda", dtype="float32", max_coc_tokens=12,
                                num_samples=2, **{switch: on}))
            for on in (False, True)]
