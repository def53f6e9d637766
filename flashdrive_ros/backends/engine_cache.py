"""TensorRT plans on disk, keyed by everything that makes a plan valid, checked on load.

Key: SHA-256 of the ONNX graph, TensorRT version, GPU name and SM, precision and the
optimization profiles. Each plan `<name>-<key>.plan` has beside it `.plan.sha256` (the plan's
own SHA-256) and `.json` (the key's fields); a plan whose bytes or key record do not match is
refused on load and rebuilt by `get_or_build`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

PRECISIONS = ("fp32", "fp16", "bf16", "fp8")
KEY_CHARS = 32

log = logging.getLogger(__name__)


class IntegrityError(RuntimeError):
    """A cached plan does not match its recorded SHA-256 or key."""


@dataclass(frozen=True)
class EngineKey:
    onnx_sha256: str
    tensorrt_version: str
    gpu_name: str
    compute_capability: tuple[int, int]
    precision: str
    profiles: dict  # profile name -> input name -> [min, opt, max] shapes

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if len(self.onnx_sha256) != 64:
            raise ValueError("onnx_sha256 must be a hex SHA-256")

    def to_dict(self) -> dict:
        values = asdict(self)
        values["compute_capability"] = list(self.compute_capability)
        return values

    def digest(self) -> str:
        canonical = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


class EngineCache:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def plan_path(self, name: str, key: EngineKey) -> Path:
        return self.root / f"{name}-{key.digest()[:KEY_CHARS]}.plan"

    def load(self, name: str, key: EngineKey) -> bytes | None:
        """The cached plan, None when absent; IntegrityError when present but not intact."""
        plan = self.plan_path(name, key)
        if not plan.exists():
            return None
        sha_file, key_file = _sidecars(plan)
        if not sha_file.exists() or not key_file.exists():
            raise IntegrityError(f"{plan} has no recorded SHA-256 or key beside it")
        data = plan.read_bytes()
        fields = sha_file.read_text().split()
        recorded = fields[0] if fields else ""
        actual = hashlib.sha256(data).hexdigest()
        if recorded != actual:
            raise IntegrityError(f"{plan}: SHA-256 {actual} differs from the recorded "
                                 f"{recorded or '(empty)'}")
        if json.loads(key_file.read_text()) != key.to_dict():
            raise IntegrityError(f"{plan}: recorded key differs from the requested key")
        return data

    def store(self, name: str, key: EngineKey, data: bytes) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        plan = self.plan_path(name, key)
        sha_file, key_file = _sidecars(plan)
        _write_atomic(plan, data)
        _write_atomic(key_file, (json.dumps(key.to_dict(), indent=2) + "\n").encode())
        _write_atomic(sha_file, f"{hashlib.sha256(data).hexdigest()}  {plan.name}\n".encode())
        return plan

    def remove(self, name: str, key: EngineKey) -> None:
        plan = self.plan_path(name, key)
        for path in (plan, *_sidecars(plan)):
            path.unlink(missing_ok=True)

    def get_or_build(self, name: str, key: EngineKey, build: Callable[[], bytes]) -> bytes:
        try:
            data = self.load(name, key)
        except IntegrityError as exc:
            log.warning("rebuilding TensorRT plan: %s", exc)
            self.remove(name, key)
            data = None
        if data is None:
            data = build()
            self.store(name, key, data)
        return data


def _sidecars(plan: Path) -> tuple[Path, Path]:
    return plan.with_name(plan.name + ".sha256"), plan.with_suffix(".json")


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
