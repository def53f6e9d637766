"""Property-based fuzzing (hypothesis) of the input path: message -> array conversion, the
approximate-time synchronizer and the WindowBuilder. Only the typed errors may escape, and
every rejection carries a code and a reason."""

import math
from types import SimpleNamespace

import cv2
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flashdrive_ros.engine.types import Window
from flashdrive_ros.engine.window import REJECTION_CODES, WindowBuilder, WindowRejection
from flashdrive_ros.ros.convert import (
    JPEG_EOI,
    JPEG_SOI,
    PNG_IEND,
    PNG_SIGNATURE,
    ConversionError,
    OdometrySample,
    camera_info_intrinsics,
    decode_compressed,
    image_msg_to_rgb,
    odometry_to_sample,
    raw_to_rgb,
    seconds_to_sec_nanosec,
    stamp_to_seconds,
)
from flashdrive_ros.ros.raw_encodings import ACCEPTED_ENCODINGS, layout_of
from flashdrive_ros.ros.sync import ApproximateTimeSynchronizer

FUZZ = settings(max_examples=150, deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])
floats = st.floats(allow_nan=True, allow_infinity=True)
formats = st.one_of(st.sampled_from(["jpeg", "png", "rgb8; jpeg compressed bgr8",
                                     "bgr8; png compressed", "compressedDepth", "h264", ""]),
                    st.text(max_size=20))


def small_jpeg() -> bytes:
    return cv2.imencode(".jpg", np.full((8, 8, 3), 90, np.uint8))[1].tobytes()


payloads = st.one_of(
    st.binary(max_size=256),
    st.binary(max_size=256).map(lambda b: JPEG_SOI + b + JPEG_EOI),
    st.binary(max_size=256).map(lambda b: PNG_SIGNATURE + b + PNG_IEND),
    st.tuples(st.integers(0, 400), st.binary(max_size=32)).map(
        lambda cut: small_jpeg()[:cut[0]] + cut[1]),
)


def is_rgb(array) -> bool:
    return (isinstance(array, np.ndarray) and array.dtype == np.uint8 and array.ndim == 3
            and array.shape[2] == 3 and array.size > 0)


def converts_or_refuses(convert, *args):
    try:
        return convert(*args)
    except ConversionError as exc:
        assert exc.reason and str(exc)
        return None


@FUZZ
@given(formats, payloads)
def test_compressed_images(fmt, data):
    rgb = converts_or_refuses(decode_compressed, fmt, data)
    assert rgb is None or is_rgb(rgb)
    msg = SimpleNamespace(format=fmt, data=np.frombuffer(data, np.uint8))
    rgb = converts_or_refuses(image_msg_to_rgb, msg)
    assert rgb is None or is_rgb(rgb)


@FUZZ
@given(st.one_of(st.sampled_from([*ACCEPTED_ENCODINGS, "RGB8", "16UC1", "nv12"]),
                 st.text(max_size=10)),
       st.integers(-3, 40), st.integers(-3, 40), st.integers(-5, 200), st.binary(max_size=2000),
       st.integers(0, 1))
def test_raw_images(encoding, height, width, step, data, is_bigendian):
    rgb = converts_or_refuses(raw_to_rgb, encoding, height, width, step, data, is_bigendian)
    if rgb is not None:
        assert is_rgb(rgb) and rgb.shape[:2] == (height, width)


@FUZZ
@given(st.integers(0, 15), st.integers(0, 15), st.sampled_from(ACCEPTED_ENCODINGS),
       st.integers(0, 7), st.integers(0, 1), st.randoms(use_true_random=False))
def test_raw_images_of_consistent_size_always_convert(cells_high, cells_wide, encoding, pad,
                                                      is_bigendian, rng):
    layout = layout_of(encoding)
    height, width = cells_high * layout.cell[0], cells_wide * layout.cell[1]
    step = width * layout.pixel_bytes + pad
    data = rng.randbytes(step * height)
    rgb = converts_or_refuses(raw_to_rgb, encoding, height, width, step, data, is_bigendian)
    assert (rgb is None) == (height == 0 or width == 0)
    assert rgb is None or rgb.shape[:2] == (height, width)


def odometry(values, sec=1, nanosec=0):
    v = iter(values)
    vector = lambda *names: SimpleNamespace(**{n: next(v) for n in names})  # noqa: E731
    return SimpleNamespace(
        header=SimpleNamespace(stamp=SimpleNamespace(sec=sec, nanosec=nanosec)),
        pose=SimpleNamespace(pose=SimpleNamespace(position=vector("x", "y", "z"),
                                                  orientation=vector("x", "y", "z", "w"))),
        twist=SimpleNamespace(twist=SimpleNamespace(linear=vector("x", "y", "z"),
                                                    angular=vector("x", "y", "z"))))


@FUZZ
@given(st.lists(floats, min_size=13, max_size=13), st.integers(-2 ** 31, 2 ** 31 - 1),
       st.integers(-10, 2 * 10 ** 9))
def test_odometry(values, sec, nanosec):
    sample = converts_or_refuses(odometry_to_sample, odometry(values, sec, nanosec))
    if sample is not None:
        assert isinstance(sample, OdometrySample)
        for array in (sample.position, sample.quaternion, sample.linear, sample.angular):
            assert np.isfinite(array).all()
        assert math.isclose(float(np.linalg.norm(sample.quaternion)), 1.0, rel_tol=1e-9)
        assert math.isfinite(sample.yaw) and math.isfinite(sample.speed)


@FUZZ
@given(st.integers(-2 ** 40, 2 ** 40), st.integers(-2 ** 40, 2 ** 40), floats)
def test_stamps(sec, nanosec, seconds):
    stamp = converts_or_refuses(stamp_to_seconds, SimpleNamespace(sec=sec, nanosec=nanosec))
    assert stamp is None or math.isfinite(stamp)
    pair = converts_or_refuses(seconds_to_sec_nanosec, seconds)
    if pair is not None:
        assert -2 ** 31 <= pair[0] < 2 ** 31 and 0 <= pair[1] < 10 ** 9


@FUZZ
@given(st.lists(floats, min_size=9, max_size=9), st.integers(-5, 5000), st.integers(-5, 5000))
def test_camera_info(k, width, height):
    msg = SimpleNamespace(k=k, width=width, height=height)
    intrinsics = converts_or_refuses(camera_info_intrinsics, msg)
    if intrinsics is not None:
        assert all(math.isfinite(v) for v in intrinsics[:4])
        assert intrinsics[0] > 0 and intrinsics[1] > 0 and min(intrinsics[4:]) > 0


@FUZZ
@given(st.integers(1, 4), st.integers(1, 6), st.integers(1, 200_000_000),
       st.lists(st.tuples(st.integers(0, 3), st.integers(-10 ** 9, 10 ** 9)), max_size=80))
def test_synchronizer(inputs, queue_size, slop_ns, arrivals):
    sync = ApproximateTimeSynchronizer(inputs, queue_size, slop_ns * 1e-9)
    emitted = []
    sync.register_callback(lambda *items: emitted.append(items))
    for index, stamp in arrivals:
        sync.add(index % inputs, (index % inputs, stamp), stamp_ns=stamp)
        assert all(len(queue) <= queue_size for queue in sync.queues)
    for items in emitted:
        assert [i for i, _ in items] == list(range(inputs))
        stamps = [s for _, s in items]
        assert max(stamps) - min(stamps) < sync.slop_ns


operations = st.lists(st.one_of(
    st.tuples(st.just("image"), st.integers(0, 1), floats, st.sampled_from([(16, 24), (8, 12)])),
    st.tuples(st.just("odometry"), floats, st.sampled_from([0.0, math.nan, math.inf, 1e308]),
              st.sampled_from([(0, 0, 0, 1), (0, 0, 0, 0), (0, 0, 1, 1)])),
    st.tuples(st.just("build"), st.one_of(floats, st.none())),
    st.tuples(st.just("grid"), st.floats(0, 5), st.integers(1, 30)),
), max_size=60)


@FUZZ
@given(operations)
def test_window_builder(ops):
    builder = WindowBuilder(2, num_frames=2, frame_dt=0.1, num_history=3, history_dt=0.1)
    image = {size: np.zeros((*size, 3), np.uint8) for size in [(16, 24), (8, 12)]}

    def check(result):
        if isinstance(result, WindowRejection):
            assert result.code in REJECTION_CODES and result.reason
        else:
            assert isinstance(result, Window)
            assert np.isfinite(result.ego_history).all() and math.isfinite(result.speed)

    for op in ops:
        if op[0] == "image":
            builder.add_image(op[1], op[2], image[op[3]])
        elif op[0] == "odometry":
            builder.add_odometry(op[1], [op[2], 0, 0], op[3], [1, 0, 0])
        elif op[0] == "build":
            t0 = builder.latest_t0() if op[1] is None else op[1]
            if t0 is not None:
                check(builder.build(t0))
        else:
            start, steps = op[1], op[2]
            for k in range(steps):
                t = start + 0.05 * k
                builder.add_odometry(t, [t, 0, 0], (0, 0, 0, 1), [1, 0, 0])
                if k % 2 == 0:
                    builder.add_image(0, t, image[(16, 24)])
                    builder.add_image(1, t, image[(16, 24)])
            check(builder.build(builder.latest_t0()))


def small_h264_stream() -> list[bytes]:
    from flashdrive_ros.sim.video_encode import VideoEncoder

    encoder = VideoEncoder("h264", 32, 24, keyframe_every=4)
    return [bytes(p) for i in range(6)
            for p in encoder.encode(np.full((24, 32, 3), 40 * i, np.uint8))]


H264_STREAM = small_h264_stream()
video_packets = st.one_of(
    st.binary(max_size=256),
    st.binary(max_size=64).map(lambda b: b"\x00\x00\x00\x01" + b),
    st.tuples(st.integers(0, len(H264_STREAM) - 1), st.integers(0, 400),
              st.binary(max_size=16)).map(
        lambda cut: H264_STREAM[cut[0]][:cut[1]] + cut[2]),
)


@FUZZ
@given(st.sampled_from(["h264", "hevc"]),
       st.lists(st.tuples(floats, video_packets), max_size=8))
def test_video_streams_take_any_packets_and_stamps_without_escaping_errors(codec, pushes):
    from flashdrive_ros.ros.video_decode import VideoStream, frame_rgb

    stream = VideoStream(codec)
    for data in H264_STREAM[:2] if codec == "h264" else []:
        stream.push(len(data) * 1e-6, data)
    for stamp, data in pushes:
        out = stream.push(stamp, data)
        assert isinstance(out.problem, str)
        for frame_stamp, frame in out.frames:
            assert math.isfinite(frame_stamp) and is_rgb(frame_rgb(frame))
    stream.flush()
