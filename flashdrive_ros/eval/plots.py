"""PNG plots of a replay (matplotlib, Agg): latency per stage over time and as histograms,
bird's-eye views of predicted samples against ground truth."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from flashdrive_ros.engine.types import STAGES  # noqa: E402
from flashdrive_ros.eval.summary import WindowResult  # noqa: E402

BEV_WINDOWS = 6


def latency_over_time(results: dict[str, list[WindowResult]], path: Path) -> Path:
    fig, axes = plt.subplots(len(STAGES), 1, figsize=(9, 2.0 * len(STAGES)), sharex=True)
    for ax, stage in zip(axes, STAGES):
        for mode, rows in results.items():
            t = [r.t0 - rows[0].t0 for r in rows if stage in r.timings_ms]
            ax.plot(t, [r.timings_ms[stage] for r in rows if stage in r.timings_ms],
                    label=mode, lw=1)
        ax.set_ylabel(f"{stage} (ms)")
        ax.grid(alpha=0.3)
    axes[0].legend(loc="upper right")
    axes[-1].set_xlabel("bag time since first window (s)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def latency_histograms(results: dict[str, list[WindowResult]], path: Path) -> Path:
    fig, axes = plt.subplots(1, len(STAGES), figsize=(3.2 * len(STAGES), 3))
    for ax, stage in zip(axes, STAGES):
        for mode, rows in results.items():
            values = [r.timings_ms[stage] for r in rows if stage in r.timings_ms]
            if values:
                ax.hist(values, bins=30, alpha=0.6, label=mode)
        ax.set_title(stage)
        ax.set_xlabel("ms")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def birds_eye(results: dict[str, list[WindowResult]], path: Path) -> Path | None:
    """A spread of windows: ground truth, constant velocity and every sample of each mode,
    x forward drawn upward, y left drawn leftward."""
    first = next(iter(results.values()))
    if not first:
        return None
    picks = np.unique(np.linspace(0, len(first) - 1, min(BEV_WINDOWS, len(first))).astype(int))
    fig, axes = plt.subplots(1, len(picks), figsize=(3.0 * len(picks), 4.5), squeeze=False)
    for ax, index in zip(axes[0], picks):
        ref = first[index]
        ax.plot(-ref.truth[:, 1], ref.truth[:, 0], "k-", lw=2, label="ground truth")
        ax.plot(-ref.constant_velocity[:, 1], ref.constant_velocity[:, 0], "--", c="gray",
                label="const. velocity")
        for (mode, rows), color in zip(results.items(), ("tab:red", "tab:green", "tab:blue")):
            for k, sample in enumerate(rows[index].samples):
                ax.plot(-sample[:, 1], sample[:, 0], c=color, lw=1.5 if k == 0 else 0.7,
                        alpha=1.0 if k == 0 else 0.5, label=mode if k == 0 else None)
        ax.plot(0, 0, "k^")
        ax.set_title(f"t0 {ref.t0:.1f} s", fontsize=9)
        ax.set_aspect("equal", adjustable="datalim")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("x forward (m)")
    axes[0][0].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def save_overlay_frames(frames: list[tuple[float, np.ndarray]], out_dir: Path) -> list[Path]:
    """frames: (stamp, RGB uint8 [H, W, 3]) -> overlay_<i>.png."""
    paths = []
    for i, (stamp, rgb) in enumerate(frames):
        path = out_dir / f"overlay_{i}.png"
        plt.imsave(path, rgb)
        paths.append(path)
    return paths


def write_plots(results: dict[str, list[WindowResult]], out_dir: Path,
                overlays: list[tuple[float, np.ndarray]] = ()) -> list[str]:
    out_dir.mkdir(parents=True, exist_ok=True)
    if not any(results.values()):
        return []
    paths = [latency_over_time(results, out_dir / "latency_over_time.png"),
             latency_histograms(results, out_dir / "latency_histograms.png"),
             birds_eye(results, out_dir / "birds_eye.png")]
    paths += save_overlay_frames(list(overlays), out_dir)
    return [str(p) for p in paths if p is not None]
