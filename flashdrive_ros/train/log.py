"""Training log: one JSON object per line in a file, and a short line on stdout."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path


class TrainLog:
    """Appends records `{"stage", "step", "time_s", **values}` to `path` and prints them."""

    def __init__(self, path: str | Path, echo: bool = True) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.echo = echo
        self.start = time.monotonic()
        self._file = self.path.open("a")

    def write(self, stage: str, step: int, **values: float | int | str) -> dict:
        record = {"stage": stage, "step": step,
                  "time_s": round(time.monotonic() - self.start, 3), **values}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        if self.echo:
            parts = " ".join(f"{k}={_fmt(v)}" for k, v in values.items())
            print(f"[{record['time_s']:8.1f}s] {stage:<10} {step:>6} {parts}", flush=True)
        return record

    def close(self) -> None:
        self._file.close()


def _fmt(value: float | int | str) -> str:
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:.4g}"
    return str(value)


def read_log(path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
