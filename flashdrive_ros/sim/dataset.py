"""Training shards from synthetic drives.

Layout of `out_dir`:

- `index.json`: {"format": "flashdrive-sim-shards", "version": 1, "camera_names": [4 names,
  model slot order], "width", "height", "intrinsics": {name: K 3x3}, "extrinsics": {name:
  4x4 camera pose in base_link, optical frame}, "frame_dt": 0.1, "num_frames": 4,
  "num_history": 16, "num_future": 64, "future_dt": 0.1, "seconds", "stride",
  "shards": [{"file", "seed", "windows"}], "windows": total}.
- `shard_<seed>.npz` (one per seed, numpy .npz, zip-deflated, no pickled objects):
  - `frames` uint8 [F, 4, H, W, 3] RGB: each 10 Hz frame of the drive stored once (camera
    order as camera_names).
  - `frame_index` int32 [N, 4]: rows of `frames` at t0-0.3, t0-0.2, t0-0.1, t0 per window.
  - `t0` float64 [N]: window time (s from the drive start).
  - `ego_history` float32 [N, 16, 4]: (x, y, z, yaw) at t0-1.5 .. t0 (0.1 s steps) in the t0
    ego frame (base_link: x forward, y left); the last row is zeros.
  - `future` float32 [N, 64, 3]: (x, y, yaw) at t0+0.1 .. t0+6.4 in the t0 ego frame.
  - `v0` float32 [N]: ego speed at t0 (m/s).
  - `coc` str [N]: chain-of-causation sentence; `decision` str [N] (one of labels.DECISIONS);
    `tags` str [N]: JSON list of scenario tags.
  - `seed` int64 [] : the drive's seed.

`load_shard` returns the same arrays plus `images` uint8 [N, 4 cameras, 4 frames, H, W, 3]
(frames oldest first), the layout of engine.types.Window.images.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from flashdrive_ros.sim.cameras import rig
from flashdrive_ros.sim.drive import FUTURE_DT, FUTURE_STEPS, HISTORY_STEPS, simulate
from flashdrive_ros.sim.frames import render_frames
from flashdrive_ros.sim.labels import label_drive
from flashdrive_ros.sim.render import Renderer

FORMAT = "flashdrive-sim-shards"
VERSION = 1
NUM_FRAMES = 4
_ARRAYS = ("frames", "frame_index", "t0", "ego_history", "future", "v0", "coc", "decision",
           "tags", "seed")


@dataclass(frozen=True)
class DatasetSummary:
    out_dir: Path
    shards: int
    windows: int


def _shard_name(seed: int) -> str:
    return f"shard_{seed:06d}.npz"


def write_dataset(out_dir: str | Path, seeds, seconds: float, width: int = 128,
                  height: int = 80, stride: int = 1, workers: int = 1,
                  compress: bool = True) -> DatasetSummary:
    """Simulate one drive per seed and write its 10 Hz windows (every `stride` frames)."""
    out_dir = Path(out_dir)
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("write_dataset needs at least one seed")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds repeat: {seeds}")
    if stride < 1:
        raise ValueError(f"stride must be >= 1, got {stride}")
    first_k = HISTORY_STEPS - 1
    if seconds < first_k * 0.1:
        raise ValueError(f"seconds must be >= {first_k * 0.1:.1f} (history), got {seconds}")
    Renderer.check_size(width, height)
    if (out_dir / "index.json").exists():
        raise FileExistsError(f"{out_dir} already holds a dataset (index.json)")
    out_dir.mkdir(parents=True, exist_ok=True)
    specs = rig()
    shards, total = [], 0
    save = np.savez_compressed if compress else np.savez
    for seed in seeds:
        log = simulate(seed, seconds)
        labels = label_drive(log.infos, log.frame_count)
        frames = np.stack([np.stack(imgs) for imgs in
                           render_frames(log, width, height, workers=workers)])
        ks = np.arange(first_k, log.frame_count, stride)
        arrays = {
            "frames": frames,
            "frame_index": np.stack([ks - 3, ks - 2, ks - 1, ks], axis=1).astype(np.int32),
            "t0": np.array([log.scenes[k].t for k in ks]),
            "ego_history": np.stack([log.history(k) for k in ks]).astype(np.float32),
            "future": np.stack([log.future(k) for k in ks]).astype(np.float32),
            "v0": np.array([log.infos[k].v for k in ks], dtype=np.float32),
            "coc": np.array([labels[k].coc for k in ks]),
            "decision": np.array([labels[k].decision for k in ks]),
            "tags": np.array([json.dumps(list(labels[k].tags)) for k in ks]),
            "seed": np.array(seed, dtype=np.int64),
        }
        save(out_dir / _shard_name(seed), **arrays)
        shards.append({"file": _shard_name(seed), "seed": seed, "windows": int(len(ks))})
        total += len(ks)
    index = {
        "format": FORMAT, "version": VERSION, "camera_names": [s.name for s in specs],
        "width": int(width), "height": int(height),
        "intrinsics": {s.name: s.intrinsics(width, height).tolist() for s in specs},
        "extrinsics": {s.name: s.base_from_camera().tolist() for s in specs},
        "frame_dt": 0.1, "num_frames": NUM_FRAMES, "num_history": HISTORY_STEPS,
        "num_future": FUTURE_STEPS, "future_dt": FUTURE_DT, "seconds": float(seconds),
        "stride": int(stride), "shards": shards, "windows": int(total),
    }
    (out_dir / "index.json").write_text(json.dumps(index, indent=1) + "\n")
    return DatasetSummary(out_dir, len(shards), int(total))


def read_index(out_dir: str | Path) -> dict:
    path = Path(out_dir) / "index.json"
    try:
        index = json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"no dataset index at {path}") from None
    if index.get("format") != FORMAT or index.get("version") != VERSION:
        raise ValueError(f"{path} is not a {FORMAT} v{VERSION} index")
    return index


def load_shard(path: str | Path) -> dict[str, np.ndarray]:
    """All arrays of one shard plus `images` [N, 4, 4, H, W, 3] gathered from `frames`."""
    with np.load(path, allow_pickle=False) as data:
        missing = [k for k in _ARRAYS if k not in data.files]
        if missing:
            raise ValueError(f"shard {path} lacks arrays {missing}")
        out = {k: data[k] for k in _ARRAYS}
    idx = out["frame_index"]
    if idx.min() < 0 or idx.max() >= len(out["frames"]):
        raise ValueError(f"shard {path}: frame_index out of range")
    out["images"] = np.ascontiguousarray(out["frames"][idx].transpose(0, 2, 1, 3, 4, 5))
    return out
