"""H.264 / H.265 camera streams: every frame of a clean stream comes out with its packet's stamp
and close to what was encoded; a stream is trusted from a keyframe on, and a lost picture
(H.264 frame_num, H.265 picture order count), a packet out of stamp order or one that does not
decode withholds frames, with the reason, until the next keyframe; a frame the camera skipped
costs nothing."""

import numpy as np
import pytest

from flashdrive_ros.ros.convert import UnsupportedEncoding
from flashdrive_ros.ros.h264_frame_num import BitReader, FrameNumbers, nal_units
from flashdrive_ros.ros.hevc_poc import PocSteps
from flashdrive_ros.ros.image_reduce import ImageReducer
from flashdrive_ros.ros.video_decode import VideoStream, encoder_codec, frame_rgb, video_codec
from flashdrive_ros.sim.video_encode import VideoEncoder

WIDTH, HEIGHT = 320, 240
PERIOD = 1 / 30
CODECS = {"h264": "h264", "h265": "hevc"}


def picture(i: int) -> np.ndarray:
    img = np.zeros((HEIGHT, WIDTH, 3), np.uint8)  # [H, W, 3]
    img[..., 1] = 9 * i
    img[50:120, 10 * i:10 * i + 40] = (255, 40, 90)
    return img


def packets(fmt: str, count: int = 25, keyframe_every: int = 10, skip_capture=(),
            bframes: int = 0) -> list[tuple[float, bytes, int]]:
    """(stamp, packet, frame index) in stream order; frames in skip_capture never reach the
    encoder (a camera that skipped them)."""
    encoder = VideoEncoder(fmt, WIDTH, HEIGHT, keyframe_every, bframes)
    frames = [i for i in range(count) if i not in skip_capture]
    made = [p for i in frames for p in encoder.encode(picture(i))] + encoder.flush()
    return [(1.0 + frames[p.pts] * PERIOD, bytes(p), frames[p.pts]) for p in made]


def decode(codec: str, stream, indices=None) -> tuple[list[tuple[int, np.ndarray]], list]:
    """(frame index, RGB) out of the stream and (packet index, problem) of the packets
    that left it waiting."""
    video = VideoStream(codec)
    frames, problems = [], []
    for k, (stamp, data, _) in enumerate(stream):
        if indices is not None and k not in indices:
            continue
        out = video.push(stamp, data)
        frames += [(round((t - 1.0) / PERIOD), frame_rgb(f)) for t, f in out.frames]
        if out.problem:
            problems.append((k, out.problem))
    frames += [(round((t - 1.0) / PERIOD), frame_rgb(f)) for t, f in video.flush().frames]
    return frames, problems


@pytest.mark.parametrize("fmt", ["h264", "h265"])
def test_a_clean_stream_gives_every_frame_with_its_stamp_close_to_what_was_encoded(fmt):
    frames, problems = decode(CODECS[fmt], packets(fmt))
    assert [i for i, _ in frames] == list(range(25))
    assert problems == []
    for i, rgb in frames:
        assert rgb.shape == (HEIGHT, WIDTH, 3) and rgb.dtype == np.uint8
        assert np.abs(rgb.astype(int) - picture(i).astype(int)).mean() < 4.0


@pytest.mark.parametrize("fmt,reason", [("h264", "frame_num 4, expected 3"),
                                        ("h265", "order count 14, expected 13")])
def test_a_lost_packet_withholds_frames_until_the_next_keyframe(fmt, reason):
    stream = packets(fmt)
    kept = set(range(len(stream))) - {13}
    frames, problems = decode(CODECS[fmt], stream, kept)
    assert [i for i, _ in frames] == [*range(13), *range(20, 25)]
    assert [k for k, _ in problems] == list(range(14, 20))
    assert reason in problems[0][1] and "until the next keyframe" in problems[0][1]


@pytest.mark.parametrize("fmt", ["h264", "h265"])
def test_a_camera_that_skips_a_frame_before_encoding_loses_nothing(fmt):
    frames, problems = decode(CODECS[fmt], packets(fmt, skip_capture={13, 17}))
    assert [i for i, _ in frames] == [i for i in range(25) if i not in (13, 17)]
    assert problems == []


@pytest.mark.parametrize("fmt", ["h264", "h265"])
def test_a_stream_joined_after_its_keyframe_waits_for_the_next_one(fmt):
    stream = packets(fmt)
    frames, problems = decode(CODECS[fmt], stream, set(range(4, len(stream))))
    assert [i for i, _ in frames] == list(range(10, 25))
    assert [k for k, _ in problems] == list(range(4, 10))
    assert "no keyframe yet" in problems[0][1]


def test_a_packet_out_of_stamp_order_is_not_decoded_and_a_corrupt_packet_unsyncs():
    stream = packets("h264")
    video = VideoStream("h264")
    for stamp, data, _ in stream[:5]:
        assert video.push(stamp, data).frames
    late = video.push(stream[2][0], stream[2][1])
    assert late.frames == [] and "not decoded" in late.problem
    video = VideoStream("h264")
    for stamp, data, _ in stream[:5]:
        video.push(stamp, data)
    broken = video.push(stream[5][0], stream[5][1][: len(stream[5][1]) // 3])
    after = video.push(stream[6][0], stream[6][1])
    assert broken.problem and after.frames == [] and after.problem
    resumed = [video.push(s, d) for s, d, _ in stream[7:12]]
    assert resumed[-1].frames and not resumed[-1].problem


def test_a_stream_with_b_frames_stamped_at_capture_is_refused_by_name():
    stream = packets("h264", bframes=2)
    assert [i for _, _, i in stream][:4] != sorted(i for _, _, i in stream[:4])
    frames, problems = decode("h264", stream)
    assert len(frames) < 25
    assert any("B-frames" in p for _, p in problems)


def test_video_formats_and_the_reduced_frame():
    assert video_codec("h264") == "h264" and video_codec("H.265") == "hevc"
    assert video_codec("hevc") == "hevc" and video_codec("bgr8; jpeg compressed bgr8") is None
    with pytest.raises(UnsupportedEncoding, match="not H.264 or H.265"):
        video_codec("vp9")
    assert [encoder_codec(e) for e in ("libx264", "h264_nvenc", "hevc_nvenc", "libx265",
                                       "libvpx-vp9")] == ["h264", "h264", "hevc", "hevc", None]
    (stamp, data, _), *_ = packets("h264", count=1)
    (_, frame), = VideoStream("h264").push(stamp, data).frames
    assert frame_rgb(frame, ImageReducer((60, 80))).shape == (60, 80, 3)


def test_the_h264_reader_finds_nal_units_and_reads_exp_golomb_codes():
    assert nal_units(b"\x00\x00\x00\x01\x67\xaa\x00\x00\x01\x68\xbb") == [b"\x67\xaa",
                                                                          b"\x68\xbb"]
    bits = BitReader(bytes([0b10100110, 0b01000000]))
    assert [bits.ue(), bits.ue(), bits.ue(), bits.se()] == [0, 1, 2, 2]


def test_a_parameter_set_cut_short_is_named_and_unsyncs_the_stream():
    assert FrameNumbers().check(b"\x00\x00\x01\x67\x64").startswith("unreadable H.264 header")
    assert PocSteps().check(b"\x00\x00\x01\x42\x01\x01").startswith("unreadable H.265 header")
    stream = packets("h264")
    video = VideoStream("h264")
    for stamp, data, _ in stream[:3]:
        video.push(stamp, data)
    cut = video.push(stream[3][0], b"\x00\x00\x01\x67\x64")
    assert "unreadable H.264 header" in cut.problem
    assert video.push(stream[4][0], stream[4][1]).frames == []
