"""What the benchmark ran on."""

from __future__ import annotations

import platform
import socket
from datetime import datetime, timezone

import torch


def machine_info(device: str) -> dict:
    info = {"hostname": socket.gethostname(), "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "python": platform.python_version(), "torch": torch.__version__,
            "cuda": torch.version.cuda, "cpu_threads": torch.get_num_threads(),
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    try:
        import transformers
        info["transformers"] = transformers.__version__
    except ImportError:
        info["transformers"] = None
    if torch.device(device).type == "cuda":
        props = torch.cuda.get_device_properties(torch.device(device))
        info["gpu"] = {"name": props.name, "memory_bytes": props.total_memory,
                       "multiprocessors": props.multi_processor_count,
                       "capability": f"{props.major}.{props.minor}",
                       "count": torch.cuda.device_count()}
    else:
        info["gpu"] = None
    return info
