"""Soak: a sim bag looped through ROS into the drive node for a given time while its resident
memory, thread count and plan latency are sampled; the summary gives the RSS slope
(MB/min), the latency drift and the thread counts."""

from __future__ import annotations

import json
import math
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from flashdrive_ros.ros.harness.node_process import read_process
from flashdrive_ros.ros.harness.node_session import node_session
from flashdrive_ros.ros.harness.stream import NS_PER_S, looped, read_stream
from flashdrive_ros.ros.params import DriveParams

CAMERA_PERIOD_NS = NS_PER_S // 10


@dataclass
class SoakSettings:
    bag: Path
    model_dir: Path
    out_dir: Path
    seconds: float = 1800.0
    sample_s: float = 5.0
    warmup_fraction: float = 0.2
    rate: float = 1.0
    device: str = "cpu"

    def __post_init__(self) -> None:
        self.bag, self.model_dir, self.out_dir = (Path(self.bag), Path(self.model_dir),
                                                  Path(self.out_dir))
        for name in ("seconds", "sample_s", "rate"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be finite and > 0, got {value}")
        if not 0 <= self.warmup_fraction < 1:
            raise ValueError(f"warmup_fraction must be in [0, 1), got {self.warmup_fraction}")
        if self.seconds < 3 * self.sample_s:
            raise ValueError(f"seconds {self.seconds} must cover >= 3 samples of "
                             f"{self.sample_s} s")


@dataclass(frozen=True)
class SoakSample:
    elapsed_s: float
    rss_mb: float
    threads: int
    windows_planned: int


def slope_per_minute(t_s: np.ndarray, values: np.ndarray) -> float:
    if len(t_s) < 2 or np.ptp(t_s) == 0:
        return 0.0
    return float(np.polyfit(t_s / 60.0, values, 1)[0])


def summarize(samples: list[SoakSample], latencies: list[tuple[float, float]],
              warmup_fraction: float, seconds: float) -> dict:
    """samples over the run; latencies: (elapsed s, total ms) per plan. Slopes and drifts are
    taken after the warm-up (the first warmup_fraction of the run)."""
    settled = [s for s in samples if s.elapsed_s >= warmup_fraction * seconds] or samples
    t = np.array([s.elapsed_s for s in settled])
    rss = np.array([s.rss_mb for s in settled])
    threads = [s.threads for s in settled]
    late = np.array([ms for at, ms in latencies if at >= warmup_fraction * seconds
                     and math.isfinite(ms)])
    quarter = max(len(late) // 4, 1)
    first, last = (late[:quarter], late[-quarter:]) if len(late) else (late, late)
    return {
        "samples": len(samples),
        "plans": len(latencies),
        "rss_mb": {"start": float(rss[0]), "end": float(rss[-1]), "max": float(rss.max()),
                   "slope_mb_per_min": slope_per_minute(t, rss)},
        "threads": {"start": threads[0], "end": threads[-1], "min": min(threads),
                    "max": max(threads)},
        "latency_ms": {
            "p50": float(np.median(late)) if len(late) else None,
            "p90": float(np.percentile(late, 90)) if len(late) else None,
            "first_quarter_p50": float(np.median(first)) if len(first) else None,
            "last_quarter_p50": float(np.median(last)) if len(last) else None,
            "slope_ms_per_min": slope_per_minute(
                np.array([at for at, ms in latencies if at >= warmup_fraction * seconds
                          and math.isfinite(ms)]), late)},
    }


def run_soak(settings: SoakSettings) -> dict:
    params = DriveParams()
    topics = {topic: "sensor_msgs/msg/CompressedImage" for topic in params.camera_topics}
    topics[params.odom_topic] = "nav_msgs/msg/Odometry"
    messages = read_stream(settings.bag, list(topics))
    if not messages:
        raise ValueError(f"{settings.bag} holds none of {sorted(topics)}")
    name = f"drive_node_soak_{os.getpid()}"
    parameters = {"model_dir": str(settings.model_dir.resolve()), "device": settings.device,
                  "overlay_camera": "", "image_reliability": "reliable"}
    samples: list[SoakSample] = []
    with node_session(name, parameters, topics, settings.out_dir, settings.rate) as session:
        stop = threading.Event()
        player = threading.Thread(target=session.player.play,
                                  args=(looped(messages, CAMERA_PERIOD_NS), stop), daemon=True)
        start = time.monotonic()
        player.start()
        try:
            while (elapsed := time.monotonic() - start) < settings.seconds:
                if not session.node.alive():
                    raise RuntimeError(f"{name} exited during the soak; log:\n"
                                       f"{session.node.log_tail()}")
                process = read_process(session.node.pid)
                planned = int(session.observer.snapshot().planner.get("windows_planned", 0))
                samples.append(SoakSample(elapsed, process.rss_mb, process.threads, planned))
                time.sleep(min(settings.sample_s, max(settings.seconds - elapsed, 0.0)))
        finally:
            stop.set()
            player.join(timeout=10.0)
        observation = session.observer.snapshot()
    latencies = [(p.received_at - start, p.latency_ms) for p in observation.plans]
    report = {"settings": {k: str(v) if isinstance(v, Path) else v
                           for k, v in asdict(settings).items()},
              "messages_played": session.player.messages,
              **summarize(samples, latencies, settings.warmup_fraction, settings.seconds),
              "planner_message": observation.planner.get("message", ""),
              "timeline": [asdict(s) for s in samples]}
    settings.out_dir.mkdir(parents=True, exist_ok=True)
    (settings.out_dir / "soak.json").write_text(json.dumps(report, indent=2) + "\n")
    return report
