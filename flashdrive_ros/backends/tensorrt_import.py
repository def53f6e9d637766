"""The one place that imports TensorRT; selecting it where it is absent fails here."""

from __future__ import annotations

from types import ModuleType

from flashdrive_ros.model.config import ConfigError


class TensorRTUnavailable(ConfigError):
    """backend 'tensorrt' was selected but the TensorRT Python bindings do not import."""


def require_tensorrt() -> ModuleType:
    try:
        import tensorrt
    except ImportError as exc:
        raise TensorRTUnavailable(
            f"backend 'tensorrt' needs the TensorRT Python bindings, but `import tensorrt` "
            f"failed ({exc}). On Jetson Thor they come with JetPack 7 (apt install "
            f"python3-libnvinfer; TensorRT 10.13); on other machines install TensorRT 10.x "
            f"for your CUDA. Or set backend: torch.") from None
    return tensorrt
