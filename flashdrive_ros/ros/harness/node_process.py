"""The drive node in a process of its own (sim time, loopback DDS on a given domain,
autostarted or driven through its lifecycle services), and what /proc says about it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

STOP_TIMEOUT_S = 15.0
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


@dataclass(frozen=True)
class ProcessSample:
    rss_mb: float
    threads: int


def read_process(pid: int) -> ProcessSample:
    """Resident memory and thread count of process `pid` from /proc."""
    rss_pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    threads = next(int(line.split()[1]) for line in
                   Path(f"/proc/{pid}/status").read_text().splitlines()
                   if line.startswith("Threads:"))
    return ProcessSample(rss_pages * PAGE_KB / 1024.0, threads)


def stop_process(process: subprocess.Popen) -> None:
    """SIGINT a process still running and wait for it; kill it after STOP_TIMEOUT_S."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class NodeProcess:
    """`with NodeProcess(...) as node:` starts drive_node named `name` (configured and
    activated with `autostart`) and stops it with SIGINT on exit; its parameters go to
    `<file_stem>.yaml` and its output to `<file_stem>.log` in `out_dir` (stem: the name)."""

    def __init__(self, name: str, parameters: dict, domain_id: int, out_dir: Path,
                 autostart: bool = True, file_stem: str | None = None) -> None:
        self.name = name
        self.out_dir = Path(out_dir)
        stem = file_stem or name
        self.params_file = self.out_dir / f"{stem}.yaml"
        self.log_file = self.out_dir / f"{stem}.log"
        self.autostart = autostart
        self.parameters = {"use_sim_time": True, **parameters}
        self.domain_id = domain_id
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> NodeProcess:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.params_file.write_text(yaml.safe_dump(
            {"/**": {"ros__parameters": self.parameters}}))
        env = dict(os.environ, ROS_DOMAIN_ID=str(self.domain_id),
                   ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST", PYTHONUNBUFFERED="1")
        env.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
        command = [sys.executable, "-m", "flashdrive_ros.ros.node",
                   *(["--autostart"] if self.autostart else []),
                   "--ros-args", "--params-file", str(self.params_file),
                   "-r", f"__node:={self.name}"]
        with open(self.log_file, "w") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                            env=env)
        return self

    def __exit__(self, *exc) -> None:
        if self.process is not None:
            stop_process(self.process)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, chars: int = 3000) -> str:
        return log_tail(self.log_file, chars)


def log_tail(path: Path, chars: int = 3000) -> str:
    """The last `chars` characters of a log file ("" when it does not exist)."""
    text = path.read_text(errors="replace") if path.exists() else ""
    return text[-chars:]
