"""Camera frames encoded the way a vehicle's video encoder streams them: H.264 or H.265 in
Annex B byte stream, one packet per frame, parameter sets repeated at every keyframe, a keyframe
every `keyframe_every` frames (FFmpeg's libx264 / libx265 through PyAV)."""

from __future__ import annotations

from fractions import Fraction

import av
import numpy as np

VIDEO_ENCODERS = {"h264": "libx264", "h265": "libx265"}


class VideoEncoder:
    """`encode(rgb)` -> the packets the frame completes (one with `bframes` 0; with B-frames
    a reordered stream, whose packets carry their frame's index as `pts`), `flush()` -> the
    rest."""

    def __init__(self, fmt: str, width: int, height: int, keyframe_every: int = 30,
                 bframes: int = 0, quality: int = 23) -> None:
        if fmt not in VIDEO_ENCODERS:
            raise ValueError(f"video format {fmt!r} is not one of {list(VIDEO_ENCODERS)}")
        if width % 2 or height % 2:
            raise ValueError(f"a {fmt} camera needs an even size, got {width}x{height}")
        encoder = av.CodecContext.create(VIDEO_ENCODERS[fmt], "w")
        encoder.width, encoder.height = width, height
        encoder.pix_fmt = "yuv420p"
        encoder.time_base = Fraction(1, 30)
        encoder.max_b_frames = bframes
        if fmt == "h264":
            encoder.options = {"preset": "veryfast", "crf": str(quality),
                               "g": str(keyframe_every), "keyint_min": str(keyframe_every),
                               "sc_threshold": "0", "bf": str(bframes), "threads": "1",
                               **({} if bframes else {"tune": "zerolatency"})}
        else:
            encoder.options = {"preset": "veryfast", "crf": str(quality), "x265-params":
                               f"keyint={keyframe_every}:min-keyint={keyframe_every}:"
                               f"scenecut=0:bframes={bframes}:log-level=error:pools=1:"
                               f"frame-threads=1:repeat-headers=1",
                               **({} if bframes else {"tune": "zerolatency"})}
        encoder.open()
        self.fmt = fmt
        self._encoder = encoder
        self._count = 0

    def encode(self, rgb: np.ndarray) -> list[av.Packet]:
        """RGB uint8 [H, W, 3] at the encoder's size -> the packets it completes."""
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
        frame.pts = self._count
        self._count += 1
        return list(self._encoder.encode(frame))

    def flush(self) -> list[av.Packet]:
        return list(self._encoder.encode(None))
