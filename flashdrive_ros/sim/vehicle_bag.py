"""A synthetic drive written the way a vehicle logger records it.

Every property of a vehicle recording is a switch of VehicleStyle: cameras at 30 Hz, each with
its own transport latency (bag log time = header stamp + latency, so log times are not sorted
across topics), dropped frames, stamp offsets, image size and encoding (raw Image in any
encoding of sim/raw_pixels.py, CompressedImage jpeg / png, or H.264 / H.265 video packets in
CompressedImage or foxglove_msgs/CompressedVideo); odometry in a map frame with
UTM-like offsets; vehicle topic names; /tf, /rosout and a vendor-typed velocity report besides;
the rosbag2 layout of Jazzy or of Humble (no message definitions in sqlite3). Frames between
the 10 Hz scenes are rendered with the ego pose of their own time (other road users from the
nearest scene), at the render size and then resized to each camera's size. The same seed gives
the same drive as `write_bag`, so its ground truth (odometry) and labels are those of the
simulator bag.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import cv2
import numpy as np

from flashdrive_ros.sim import messages as M
from flashdrive_ros.sim.bag import (
    COMPRESSIONS,
    check_layout,
    default_workers,
    last_odometry_step,
    open_bag,
    simulate_for_bag,
)
from flashdrive_ros.sim.cameras import DEFAULT_HEIGHT, DEFAULT_WIDTH, rig
from flashdrive_ros.sim.clock import stamp_ns
from flashdrive_ros.sim.drive import FRAME_HZ, DriveLog, SceneSnapshot
from flashdrive_ros.sim.frames import encode_jpeg, render_scenes
from flashdrive_ros.sim.raw_pixels import RAW_ENCODINGS, raw_pixels, size_cell
from flashdrive_ros.sim.render import Renderer
from flashdrive_ros.sim.topics import (
    CAMERA_NAMES,
    LABELS_TOPIC,
    ODOM_FRAME,
    ODOMETRY_TOPIC,
    TF_STATIC_TOPIC,
    camera_image_topic,
    camera_info_topic,
)
from flashdrive_ros.sim.vehicle import EgoState
from flashdrive_ros.sim.video_encode import VIDEO_ENCODERS, VideoEncoder

COMPRESSED_ENCODINGS = ("jpeg", "png")
VIDEO_ENCODINGS = tuple(VIDEO_ENCODERS)
ENCODINGS = COMPRESSED_ENCODINGS + VIDEO_ENCODINGS + RAW_ENCODINGS
VIDEO_MESSAGES = {"compressed_image": "sensor_msgs/msg/CompressedImage",
                  "compressed_video": M.COMPRESSED_VIDEO_TYPE,
                  "ffmpeg_packet": M.FFMPEG_PACKET_TYPE}
VEHICLE_CAMERA_NAMES = {"camera_cross_left_120fov": "cross_left",
                        "camera_front_wide_120fov": "front_wide",
                        "camera_cross_right_120fov": "cross_right",
                        "camera_front_tele_30fov": "front_tele"}
VEHICLE_ODOMETRY_TOPIC = "/localization/kinematic_state"
TF_TOPIC = "/tf"
ROSOUT_TOPIC = "/rosout"
VELOCITY_STATUS_TOPIC = "/vehicle/status/velocity_status"
ROSOUT_PERIOD_S = 1.0


@dataclass(frozen=True)
class VehicleStyle:
    """How the logger records. latency_ms: range of each camera's transport latency (drawn
    once per camera), plus +-latency_jitter_ms per message; stamp_offset_ms: each camera's
    header stamps are shifted by up to +-this against the exposure; sizes (width, height) and
    encodings per camera in rig order; odometry_offset (x, y, z) in metres is added to every
    odometry and /tf position; vehicle_topics: /sensing/camera/front_wide/... names, else the
    simulator's; compression: none, storage (mcap zstd chunks), file or message (zstd);
    split_s: a new bag file every split_s seconds of log time (None: one file); extra_topics:
    /tf, /rosout and VELOCITY_STATUS_TOPIC (an Autoware type, not in the ROS 2 typestores);
    layout: jazzy, or humble (sim/humble_bag.py: a sqlite3 file holds no message definitions,
    so that vendor type is known by name only); video_message: the type of an h264 / h265
    camera's packets (compressed_image: sensor_msgs/CompressedImage with format h264 / h265;
    compressed_video: foxglove_msgs/CompressedVideo; ffmpeg_packet:
    ffmpeg_image_transport_msgs/FFMPEGPacket), a keyframe every keyframe_every frames;
    a video camera's dropped frames are never encoded (the camera skipped them)."""

    camera_hz: float = 30.0
    latency_ms: tuple[float, float] = (40.0, 80.0)
    latency_jitter_ms: float = 5.0
    drop_rate: float = 0.03
    stamp_offset_ms: float = 10.0
    sizes: tuple[tuple[int, int], ...] = ((1280, 720), (1920, 1080), (1280, 720), (1280, 720))
    encodings: tuple[str, ...] = ("rgb8", "bgr8", "bgr8", "rgb8")
    odometry_frame: str = "map"
    odometry_offset: tuple[float, float, float] = (612_345.0, 987_654.0, 42.0)
    odometry_latency_ms: float = 10.0
    vehicle_topics: bool = True
    extra_topics: bool = True
    labels: bool = True
    compression: str = "none"
    split_s: float | None = None
    layout: str = "jazzy"
    video_message: str = "compressed_image"
    keyframe_every: int = 30

    def __post_init__(self) -> None:
        object.__setattr__(self, "sizes", tuple(tuple(int(v) for v in s) for s in self.sizes))
        object.__setattr__(self, "encodings", tuple(self.encodings))
        object.__setattr__(self, "latency_ms", tuple(float(v) for v in self.latency_ms))
        object.__setattr__(self, "odometry_offset",
                           tuple(float(v) for v in self.odometry_offset))
        cameras = len(CAMERA_NAMES)
        if not (math.isfinite(self.camera_hz) and 0 < self.camera_hz <= 100):
            raise ValueError(f"camera_hz must be in (0, 100], got {self.camera_hz}")
        lo, hi = self.latency_ms
        if len(self.latency_ms) != 2 or not 0 <= lo <= hi:
            raise ValueError(f"latency_ms must be (low, high) with 0 <= low <= high, got "
                             f"{self.latency_ms}")
        period_ms = 1000.0 / self.camera_hz
        if not 0 <= self.latency_jitter_ms < period_ms / 2:
            raise ValueError(f"latency_jitter_ms must be in [0, {period_ms / 2:g}) (half the "
                             f"camera period), got {self.latency_jitter_ms}")
        if not 0 <= self.drop_rate <= 0.5:
            raise ValueError(f"drop_rate must be in [0, 0.5], got {self.drop_rate}")
        if not 0 <= self.stamp_offset_ms < period_ms / 2:
            raise ValueError(f"stamp_offset_ms must be in [0, {period_ms / 2:g}), got "
                             f"{self.stamp_offset_ms}")
        if len(self.sizes) != cameras or any(len(s) != 2 for s in self.sizes):
            raise ValueError(f"sizes must hold {cameras} (width, height) pairs, got "
                             f"{self.sizes}")
        for width, height in self.sizes:
            Renderer.check_size(width, height)
        if len(self.encodings) != cameras or set(self.encodings) - set(ENCODINGS):
            raise ValueError(f"encodings must hold {cameras} of {ENCODINGS}, got "
                             f"{self.encodings}")
        if self.video_message not in VIDEO_MESSAGES:
            raise ValueError(f"video_message must be one of {list(VIDEO_MESSAGES)}, got "
                             f"{self.video_message!r}")
        if self.keyframe_every < 1:
            raise ValueError(f"keyframe_every must be >= 1, got {self.keyframe_every}")
        for (width, height), encoding in zip(self.sizes, self.encodings):
            cell_width, cell_height = (2, 2) if encoding in VIDEO_ENCODINGS \
                else size_cell(encoding)
            if width % cell_width or height % cell_height:
                raise ValueError(f"a {encoding} camera needs a size that is a multiple of "
                                 f"{cell_width}x{cell_height}, got {width}x{height}")
        if not self.odometry_frame or "/" in self.odometry_frame.strip("/"):
            raise ValueError(f"odometry_frame must be a frame name, got "
                             f"{self.odometry_frame!r}")
        if len(self.odometry_offset) != 3 or not all(map(math.isfinite, self.odometry_offset)):
            raise ValueError(f"odometry_offset must be 3 finite metres, got "
                             f"{self.odometry_offset}")
        if self.odometry_latency_ms < 0:
            raise ValueError(f"odometry_latency_ms must be >= 0, got "
                             f"{self.odometry_latency_ms}")
        if self.compression not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {sorted(COMPRESSIONS)}, got "
                             f"{self.compression!r}")
        if self.split_s is not None and not (math.isfinite(self.split_s) and self.split_s > 0):
            raise ValueError(f"split_s must be > 0 seconds, got {self.split_s}")
        check_layout(self.layout, self.compression)

    @classmethod
    def simulator(cls, width: int = DEFAULT_WIDTH, height: int = DEFAULT_HEIGHT
                  ) -> VehicleStyle:
        """Every switch off: the conventions of `write_bag`."""
        cameras = len(CAMERA_NAMES)
        return cls(camera_hz=float(FRAME_HZ), latency_ms=(0.0, 0.0), latency_jitter_ms=0.0,
                   drop_rate=0.0, stamp_offset_ms=0.0, sizes=((width, height),) * cameras,
                   encodings=("jpeg",) * cameras, odometry_frame=ODOM_FRAME,
                   odometry_offset=(0.0, 0.0, 0.0), odometry_latency_ms=0.0,
                   vehicle_topics=False, extra_topics=False)

    def image_topic(self, camera: str, encoding: str) -> str:
        if self.vehicle_topics:
            base = f"/sensing/camera/{VEHICLE_CAMERA_NAMES[camera]}/image_raw/compressed"
        else:
            base = camera_image_topic(camera)
        if encoding in COMPRESSED_ENCODINGS:
            return base
        raw = base.removesuffix("/compressed")
        return f"{raw}/{encoding}" if encoding in VIDEO_ENCODINGS else raw

    def image_type(self, encoding: str) -> str:
        if encoding in VIDEO_ENCODINGS:
            return VIDEO_MESSAGES[self.video_message]
        return ("sensor_msgs/msg/CompressedImage" if encoding in COMPRESSED_ENCODINGS
                else "sensor_msgs/msg/Image")

    def info_topic(self, camera: str) -> str:
        if self.vehicle_topics:
            return f"/sensing/camera/{VEHICLE_CAMERA_NAMES[camera]}/camera_info"
        return camera_info_topic(camera)

    @property
    def odometry_topic(self) -> str:
        return VEHICLE_ODOMETRY_TOPIC if self.vehicle_topics else ODOMETRY_TOPIC


@dataclass(frozen=True)
class CameraEncoder:
    """Rendered RGB images -> per camera a payload: bytes (jpeg / png) or the pixels in the
    raw encoding's layout (sim/raw_pixels.py; RGB for a video camera, whose encoder is a
    stream of its own), at that camera's size."""

    sizes: tuple[tuple[int, int], ...]
    encodings: tuple[str, ...]

    def __call__(self, images: list[np.ndarray]) -> list:
        return [self._encode(img, size, enc)
                for img, size, enc in zip(images, self.sizes, self.encodings)]

    @staticmethod
    def _encode(rgb: np.ndarray, size: tuple[int, int], encoding: str):
        if (rgb.shape[1], rgb.shape[0]) != size:
            shrink = size[0] < rgb.shape[1]
            rgb = cv2.resize(rgb, size, interpolation=cv2.INTER_AREA if shrink
                             else cv2.INTER_LINEAR)
        if encoding == "jpeg":
            return encode_jpeg(rgb)
        if encoding == "png":
            ok, buf = cv2.imencode(".png", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
            if not ok:
                raise RuntimeError("PNG encoding failed")
            return buf.tobytes()
        if encoding in VIDEO_ENCODINGS:
            return rgb
        return raw_pixels(rgb, encoding)


@dataclass(frozen=True)
class VehicleBagSummary:
    """camera_frames: messages written per camera (rig order); dropped: frames not written;
    topics: the mapping a replay needs (keys of a topics YAML)."""

    path: Path
    seconds: float
    camera_frames: tuple[int, ...]
    dropped: int
    odometry: int
    topics: dict = field(default_factory=dict)


def video_message(style: VehicleStyle, encoder: VideoEncoder, rgb: np.ndarray, t_ns: int,
                  camera: str):
    """The message of one frame of a video camera, as style.video_message records it."""
    (packet,) = encoder.encode(rgb)
    if style.video_message == "compressed_video":
        return M.compressed_video(t_ns, camera, bytes(packet), encoder.fmt)
    if style.video_message == "ffmpeg_packet":
        return M.ffmpeg_packet(t_ns, camera, bytes(packet), VIDEO_ENCODERS[encoder.fmt],
                               rgb.shape[1], rgb.shape[0], int(packet.pts),
                               bool(packet.is_keyframe))
    return M.compressed_image(t_ns, camera, bytes(packet), encoder.fmt)


def scene_at(log: DriveLog, t: float) -> SceneSnapshot:
    """The snapshot at time t: the 10 Hz scene itself at its time, else the nearest scene with
    the ego interpolated from the 50 Hz log."""
    k = min(int(round(t * FRAME_HZ)), len(log.scenes) - 1)
    if abs(t * FRAME_HZ - k) < 1e-9:
        return log.scenes[k]
    times = log.ego[:, 0]
    x, y, v = (float(np.interp(t, times, log.ego[:, c])) for c in (1, 2, 4))
    yaw = float(np.interp(t, times, np.unwrap(log.ego[:, 3])))
    return replace(log.scenes[k], t=t, ego=EgoState(x, y, yaw, v))


def write_vehicle_bag(out: str | Path, seconds: float, seed: int,
                      style: VehicleStyle | None = None, fmt: str = "mcap",
                      width: int = DEFAULT_WIDTH, height: int = DEFAULT_HEIGHT,
                      workers: int | None = None) -> VehicleBagSummary:
    """Simulate `seconds` of driving for `seed` and write it as `style` records it; width x
    height is the render size (each camera's image is resized to style.sizes)."""
    out, style = Path(out), style or VehicleStyle()
    log, labels = simulate_for_bag(out, fmt, seconds, seed, width, height)
    specs = rig()
    frame_times = np.arange(int(math.floor(seconds * style.camera_hz + 1e-9)) + 1) \
        / style.camera_hz
    rng = np.random.default_rng([seed, 0x7E41C1E])
    latency_s = rng.uniform(*style.latency_ms, len(specs)) * 1e-3  # [C]
    offset_s = rng.uniform(-1, 1, len(specs)) * style.stamp_offset_ms * 1e-3  # [C]
    jitter_s = rng.uniform(-1, 1, (len(frame_times), len(specs))) \
        * style.latency_jitter_ms * 1e-3  # [F, C]
    dropped = rng.random((len(frame_times), len(specs))) < style.drop_rate  # [F, C]
    scenes = [scene_at(log, float(t)) for t in frame_times]
    encoder = CameraEncoder(style.sizes, style.encodings)
    workers = default_workers() if workers is None else workers
    ox, oy, oz = style.odometry_offset
    odom_latency_ns = int(round(style.odometry_latency_ms * 1e6))
    last_step = last_odometry_step(seconds)
    with open_bag(out, fmt, style.compression, style.split_s, style.layout) as bag:
        put = bag.put
        tf_static = bag.connection(TF_STATIC_TOPIC, "tf2_msgs/msg/TFMessage", latched=True)
        img_conns = [bag.connection(style.image_topic(s.name, enc), style.image_type(enc))
                     for s, enc in zip(specs, style.encodings)]
        videos = {c: VideoEncoder(enc, *style.sizes[c], style.keyframe_every)
                  for c, enc in enumerate(style.encodings) if enc in VIDEO_ENCODINGS}
        info_conns = [bag.connection(style.info_topic(s.name), "sensor_msgs/msg/CameraInfo")
                      for s in specs]
        odom_conn = bag.connection(style.odometry_topic, "nav_msgs/msg/Odometry")
        label_conn = bag.connection(LABELS_TOPIC, "std_msgs/msg/String") if style.labels \
            else None
        tf_conn = bag.connection(TF_TOPIC, "tf2_msgs/msg/TFMessage") if style.extra_topics \
            else None
        rosout_conn = bag.connection(ROSOUT_TOPIC, "rcl_interfaces/msg/Log") \
            if style.extra_topics else None
        velocity_conn = bag.connection(VELOCITY_STATUS_TOPIC, M.VELOCITY_REPORT_TYPE) \
            if style.extra_topics else None
        t0 = stamp_ns(0.0)
        put(tf_static, t0, M.camera_tf_static(t0, specs))
        cursor = {"odometry": 0, "label": 0, "rosout": 0.0}

        def write_until(t: float) -> None:
            """Odometry, /tf, the velocity report, labels and /rosout stamped up to t."""
            while cursor["odometry"] <= last_step and log.ego[cursor["odometry"], 0] <= t:
                ts, x, y, yaw, v, yaw_rate, _ = log.ego[cursor["odometry"]]
                s_ns = stamp_ns(ts)
                put(odom_conn, s_ns + odom_latency_ns,
                    M.odometry(s_ns, x + ox, y + oy, yaw, v, yaw_rate,
                               frame_id=style.odometry_frame, z=oz))
                if tf_conn is not None:
                    put(tf_conn, s_ns, M.ego_tf(s_ns, style.odometry_frame, x + ox, y + oy,
                                                oz, yaw))
                if velocity_conn is not None:
                    put(velocity_conn, s_ns, M.velocity_report(s_ns, v, yaw_rate))
                cursor["odometry"] += 1
            while label_conn is not None and cursor["label"] < log.frame_count \
                    and cursor["label"] / FRAME_HZ <= t:
                l_ns = stamp_ns(cursor["label"] / FRAME_HZ)
                put(label_conn, l_ns, M.label_message(labels[cursor["label"]]))
                cursor["label"] += 1
            while rosout_conn is not None and cursor["rosout"] <= min(t, seconds):
                r_ns = stamp_ns(cursor["rosout"])
                put(rosout_conn, r_ns, M.rosout_log(r_ns, "localization",
                                                    "pose estimate converged"))
                cursor["rosout"] += ROSOUT_PERIOD_S

        frames = render_scenes(log.world, scenes, width, height, encoder, workers)
        for j, payloads in enumerate(frames):
            t = float(frame_times[j])
            write_until(t + 1e-9)
            for c, (spec, enc, payload) in enumerate(zip(specs, style.encodings, payloads)):
                if dropped[j, c]:
                    continue
                s_ns = stamp_ns(t + offset_s[c])
                log_ns = s_ns + int(round((latency_s[c] + jitter_s[j, c]) * 1e9))
                if c in videos:
                    msg = video_message(style, videos[c], payload, s_ns, spec.name)
                elif enc in COMPRESSED_ENCODINGS:
                    msg = M.compressed_image(s_ns, spec.name, payload, enc)
                else:
                    msg = M.raw_image(s_ns, spec.name, payload, enc)
                put(img_conns[c], log_ns, msg)
                width_c, height_c = style.sizes[c]
                put(info_conns[c], log_ns, M.camera_info(s_ns, spec, width_c, height_c))
        write_until(math.inf)
    topics = {"cameras": [c.topic for c in img_conns], "odometry": odom_conn.topic,
              "labels": LABELS_TOPIC if style.labels else None}
    written = tuple(int((~dropped[:, c]).sum()) for c in range(len(specs)))
    return VehicleBagSummary(out, float(seconds), written, int(dropped.sum()), last_step + 1,
                             topics)
