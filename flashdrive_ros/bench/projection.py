"""Projection of measured stage times to Jetson AGX Thor from bandwidth and compute.

Each stage's floor is recomputed with Thor's rates (the same bytes and FLOPs, bench/work.py),
and the measured time is scaled by Thor floor / measured floor: the stage keeps the ratio to
its floor it has on the measuring GPU. Thor's rates are its nominal figures times the
fraction of nominal the measuring GPU reached in the run's own floor measurements (H200
nominal figures below; on another device the measured rates count as nominal)."""

from __future__ import annotations

from flashdrive_ros.bench.floors import Floors
from flashdrive_ros.bench.work import Work, stage_floors
from flashdrive_ros.engine.types import STAGES
from flashdrive_ros.model.config import ModelConfig

H200_NOMINAL = {"copy_bytes_per_s": 4.8e12, "matmul_flops_per_s": 989e12}
THOR_NOMINAL = {"copy_bytes_per_s": 273e9, "matmul_flops_per_s": 2070e12 / 8}
SOURCES = {
    "h200": "H200 SXM datasheet: HBM3e 4.8 TB/s, dense BF16 989 TFLOP/s",
    "thor": "Jetson AGX Thor (T5000): LPDDR5X 273 GB/s; 2070 FP4 TFLOP/s with sparsity, "
            "taken as 259 dense BF16 TFLOP/s (/2 dense, /2 FP8, /2 BF16)",
}


def efficiency(floors: Floors, gpu_name: str | None) -> dict[str, float]:
    """Measured / nominal rate of the measuring device (1 where its nominal is unknown)."""
    if gpu_name and "H200" in gpu_name:
        return {"copy": floors.copy_bytes_per_s / H200_NOMINAL["copy_bytes_per_s"],
                "matmul": floors.matmul_flops_per_s / H200_NOMINAL["matmul_flops_per_s"]}
    return {"copy": 1.0, "matmul": 1.0}


def thor_floors(floors: Floors, gpu_name: str | None) -> Floors:
    eff = efficiency(floors, gpu_name)
    return Floors(THOR_NOMINAL["copy_bytes_per_s"] * eff["copy"],
                  THOR_NOMINAL["matmul_flops_per_s"] * eff["matmul"], floors.copy_buffer_bytes,
                  floors.matmul_n, floors.matmul_dtype)


def project(run: dict, cfg: ModelConfig, work: Work, dtype_bytes: int, thor: Floors) -> dict:
    """run: one variant / sample-count entry (stages, floors) -> {stage: projected ms p50},
    total the sum of the stages."""
    floors = stage_floors(cfg, work, dtype_bytes, thor)
    out = {stage: run["stages"][stage]["p50"] * floors[stage]["floor_ms"]
           / run["floors"][stage]["floor_ms"] for stage in STAGES if stage != "total"}
    out["total"] = sum(out.values())
    return out
