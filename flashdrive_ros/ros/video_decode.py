"""H.264 / H.265 camera streams decoded packet by packet (FFmpeg through PyAV).

A video packet is decodable only with every packet before it back to a keyframe, so a stream
is trusted from a keyframe on and until a packet goes missing (lost in transport, dropped in
a queue or by the logger): in H.264, a reference picture whose frame_num does not follow the
last one's (ros/h264_frame_num.py), in H.265 a picture order count off the stream's step
(ros/hevc_poc.py) - a camera that skips a frame before encoding it leaves no such gap; in
both, a stamp not after the last one, a packet that does not decode or a frame the
decoder marks corrupt (a truncated packet). Until the next keyframe its frames are withheld
(named in `problem`), never handed on with the decoder's error concealment in them. Output
frames carry the stamp of the packet they were decoded from (a packet whose frame has not
come out MAX_PENDING packets later is forgotten)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import av
import numpy as np

from flashdrive_ros.ros.convert import UnsupportedEncoding, byte_view
from flashdrive_ros.ros.h264_frame_num import FrameNumbers
from flashdrive_ros.ros.hevc_poc import PocSteps
from flashdrive_ros.ros.image_reduce import ImageReducer

VIDEO_CODECS = {"h264": "h264", "h.264": "h264", "avc": "h264", "h265": "hevc", "h.265": "hevc",
                "hevc": "hevc"}
OTHER_VIDEO_FORMATS = ("vp8", "vp9", "av1")
MAX_PENDING = 32


def encoder_codec(encoder: str) -> str | None:
    """The decoder of packets an FFmpeg encoder wrote (ffmpeg_image_transport's `encoding`:
    libx264, h264_nvenc, libx265, hevc_nvenc, ...; None for another codec)."""
    name = encoder.lower()
    if "264" in name or "avc" in name:
        return "h264"
    if "265" in name or "hevc" in name:
        return "hevc"
    return None


def video_codec(fmt: str) -> str | None:
    """The FFmpeg decoder of a CompressedImage / CompressedVideo format string ("h264",
    "h265", "hevc"; None for a still-image format); a video format no decoder here takes
    raises UnsupportedEncoding."""
    tokens = fmt.lower().replace(";", " ").replace("/", " ").split()
    for token in tokens:
        if token in VIDEO_CODECS:
            return VIDEO_CODECS[token]
        if token in OTHER_VIDEO_FORMATS:
            raise UnsupportedEncoding(f"video format {fmt!r} is not H.264 or H.265")
    return None


@dataclass
class VideoOutput:
    """frames: (stamp, decoded frame) that one packet completes, in display order (to RGB with
    `frame_rgb`, so that frames nobody takes cost no colour conversion); problem: why this
    packet left the stream waiting for a keyframe ("" when it is in sync)."""

    frames: list[tuple[float, av.VideoFrame]] = field(default_factory=list)
    problem: str = ""


def frame_rgb(frame: av.VideoFrame, reducer: ImageReducer | None = None) -> np.ndarray:
    """A decoded frame -> RGB uint8 [H, W, 3]; with a reducer, at the model size (halved by
    area, then the model's resize, as a raw image is)."""
    rgb = frame.to_ndarray(format="rgb24")  # [H, W, 3]
    return rgb if reducer is None else reducer.finish(reducer.stage(rgb))


class VideoStream:
    """One camera's stream: `push(stamp, data)` per packet in arrival order, `flush()` at
    its end. Not thread-safe (one caller per stream)."""

    def __init__(self, codec: str) -> None:
        self.codec = codec
        self._decoder = av.CodecContext.create(codec, "r")
        self._decoder.thread_type = "SLICE"
        self._stamps: dict[int, float] = {}
        self._next_pts = 0
        self._lost_pictures = FrameNumbers() if codec == "h264" else PocSteps()
        self.restart()

    def restart(self) -> None:
        """Forget the stamps and wait for a keyframe (a restarted time base)."""
        self._last_stamp = float("-inf")
        self._lost_pictures.restart()
        self._lose_sync("no keyframe yet")

    def _lose_sync(self, why: str) -> None:
        self._synced = False
        self._why_unsynced = why

    def push(self, stamp: float, data) -> VideoOutput:
        """The frames this packet completes; a packet whose stamp is not after the last one
        is not decoded (it would corrupt the references) and unsyncs the stream."""
        if not math.isfinite(stamp):
            return self._not_decoded(f"packet stamped {stamp}")
        if stamp <= self._last_stamp:
            reordered = (" (the stream has B-frames, whose packets come in decoding order: "
                         "encode without B-frames)" if self._decoder.has_b_frames else "")
            return self._not_decoded(f"packet stamped {stamp:.3f} after "
                                     f"{self._last_stamp:.3f}{reordered}")
        payload = byte_view(data).tobytes()
        lost = self._lost_pictures.check(payload)
        if lost:
            self._lose_sync(f"packet at {stamp:.3f}: {lost}")
        self._last_stamp = stamp
        packet = av.Packet(payload)
        packet.pts = self._next_pts
        self._stamps[self._next_pts] = stamp
        self._next_pts += 1
        try:
            frames = self._decoder.decode(packet)
        except av.FFmpegError as exc:
            if self._synced:
                self._lose_sync(f"packet at {stamp:.3f} does not decode ({exc})")
            frames = []
        out = self._output(frames)
        if not self._synced:
            out.problem = f"{self._why_unsynced}; frames withheld until the next keyframe"
        return out

    def _not_decoded(self, why: str) -> VideoOutput:
        self._lose_sync(why)
        return VideoOutput(problem=f"{why}; not decoded, frames withheld until the next "
                                   f"keyframe")

    def flush(self) -> VideoOutput:
        """The frames the decoder still holds (a reordered stream's last ones)."""
        try:
            frames = self._decoder.decode(None)
        except av.FFmpegError:
            frames = []
        return self._output(frames)

    def _output(self, frames) -> VideoOutput:
        out = VideoOutput()
        for frame in frames:
            stamp = self._stamps.pop(frame.pts, None) if frame.pts is not None else None
            if frame.is_corrupt:
                self._lose_sync(f"frame of the packet at {stamp:.3f} decoded with errors"
                                if stamp is not None else "a frame decoded with errors")
            elif not self._synced and frame.key_frame:
                self._synced = True
            if self._synced and stamp is not None:
                out.frames.append((stamp, frame))
        for pts in [p for p in self._stamps if p < self._next_pts - MAX_PENDING]:
            del self._stamps[pts]
        return out
