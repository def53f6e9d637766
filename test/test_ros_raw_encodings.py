"""Camera encodings beyond 8-bit RGB (ros/raw_encodings.py): each one written from a known RGB
image the way a driver writes it (sim/raw_pixels.py) decodes back within the format's loss,
the serialized (CDR) and deserialized paths give the same pixels, and the reduced path stays
near the model's resize of the source.

Losses, per pixel and channel (grey levels):
- colour orders, 16-bit (value * 257), 8UC3: none; mono: the source's grey, exactly.
- Bayer: OpenCV's bilinear demosaic fills a missing channel with a convex combination of
  the 3x3 neighbours that carry it, so the error is at most the largest difference to a
  neighbour in that channel, + 1 for rounding (the 1-pixel border, where OpenCV extrapolates,
  is left out). In a flat 4x4 block nothing is missing: exact away from the block edges.
- YUV 4:2:2 (BT.601 limited range): on an image whose two pixels of a chroma pair are equal,
  only the rounding of Y, U, V remains: |dR| <= 0.5 (1.164 + 1.596) + 0.5 < 2,
  |dG| <= 0.5 (1.164 + 0.813 + 0.391) + 0.5 < 2, |dB| <= 0.5 (1.164 + 2.018) + 0.5 < 3.
- reduced (model size): the plain reduce test's 4 levels (test_ros_image_reduce.py), plus
  for Bayer half a source pixel of colour shift (one pixel per 2x2 cell) times the largest
  gradient, plus for YUV its rounding (3).
"""

import cv2
import numpy as np
import pytest
from helpers.image_loss import neighbour_spread
from rclpy.serialization import deserialize_message, serialize_message
from sensor_msgs.msg import Image
from std_msgs.msg import Header

from flashdrive_ros.model.preprocess import resize_images
from flashdrive_ros.ros.cdr_image import image_header, read_image
from flashdrive_ros.ros.convert import image_msg_to_rgb, raw_to_rgb, seconds_to_stamp
from flashdrive_ros.ros.image_reduce import ImageReducer
from flashdrive_ros.ros.raw_encodings import alias_note, layout_of
from flashdrive_ros.sim.raw_pixels import (
    BAYER_ENCODINGS,
    RAW_ENCODINGS,
    YUV_ENCODINGS,
    bayer_mosaic,
    raw_pixels,
)

RNG = np.random.default_rng(11)
SMOOTH = cv2.GaussianBlur(RNG.integers(0, 256, (48, 64, 3), dtype=np.uint8), (0, 0), 3)
MODEL = (8, 8)
YUV_ROUNDING = np.array([2, 2, 3])


def fields(rgb: np.ndarray, encoding: str, pad: int = 4, big_endian: bool = False,
           low_bits: bool = False):
    """RGB [H, W, 3] -> (encoding, height, width, step, data, is_bigendian) of an Image;
    low_bits: 16-bit samples get random low bits (v * 257 reads the same in both orders)."""
    pixels = raw_pixels(rgb, encoding)
    if low_bits:
        pixels = pixels - np.random.default_rng(3).integers(0, 128, pixels.shape, np.uint16)
    if big_endian:
        pixels = pixels.astype(">u2")
    rows = np.ascontiguousarray(pixels).reshape(rgb.shape[0], -1).view(np.uint8)
    rows = np.pad(rows, ((0, 0), (0, pad)))
    return encoding, rgb.shape[0], rgb.shape[1], rows.shape[1], rows.tobytes(), int(big_endian)


def pair_constant(rgb: np.ndarray) -> np.ndarray:
    """The image with each horizontal pixel pair set to its left pixel."""
    return np.repeat(rgb[:, 0::2], 2, axis=1)


@pytest.mark.parametrize("encoding", BAYER_ENCODINGS)
def test_bayer_colours_come_back_in_their_places(encoding):
    colours = RNG.integers(0, 256, (6, 8, 3), dtype=np.uint8)
    rgb = np.repeat(np.repeat(colours, 4, axis=0), 4, axis=1)  # [24, 32, 3]: flat 4x4 blocks
    out = raw_to_rgb(*fields(rgb, encoding)[:5])
    inner = np.zeros(rgb.shape[:2], bool)
    for dy in (1, 2):
        for dx in (1, 2):
            inner[dy::4, dx::4] = True
    np.testing.assert_array_equal(out[inner], rgb[inner])
    pattern = encoding[len("bayer_"):-1]
    same_name = getattr(cv2, f"COLOR_Bayer{pattern[:2].upper()}2RGB")
    taken_by_name = cv2.cvtColor(bayer_mosaic(rgb, pattern), same_name)
    assert (taken_by_name[inner] != rgb[inner]).any(axis=1).mean() > 0.9


@pytest.mark.parametrize("encoding", RAW_ENCODINGS)
def test_decoded_rgb_equals_the_source_within_the_format_loss(encoding):
    source = pair_constant(SMOOTH) if encoding in YUV_ENCODINGS else SMOOTH
    out = raw_to_rgb(*fields(source, encoding))
    assert out.shape == source.shape and out.dtype == np.uint8
    error = np.abs(out.astype(int) - source)
    if encoding in BAYER_ENCODINGS:
        inner = (slice(1, -1), slice(1, -1))
        assert (error[inner] <= neighbour_spread(source)[inner] + 1).all()
    elif encoding in YUV_ENCODINGS:
        assert (error <= YUV_ROUNDING).all(), error.reshape(-1, 3).max(0)
    elif layout_of(encoding).channels == 1:
        gray = cv2.cvtColor(source, cv2.COLOR_RGB2GRAY)
        np.testing.assert_array_equal(out, np.repeat(gray[:, :, None], 3, axis=2))
    else:
        np.testing.assert_array_equal(out, source)


@pytest.mark.parametrize("encoding", ["rgb16", "bgr16", "mono16"])
def test_16bit_big_endian_reads_like_little_endian(encoding):
    little_fields = fields(SMOOTH, encoding, low_bits=True)
    big_fields = fields(SMOOTH, encoding, big_endian=True, low_bits=True)
    assert big_fields[4] != little_fields[4]
    little = raw_to_rgb(*little_fields)
    np.testing.assert_array_equal(raw_to_rgb(*big_fields), little)
    assert np.abs(little.astype(int) - raw_to_rgb(*fields(SMOOTH, encoding))).max() <= 1


def test_16bit_scales_full_range_to_8bit():
    samples = np.array([[0, 128, 257, 32896, 65278, 65535]], "<u2")
    out = raw_to_rgb("mono16", 1, 6, 12, samples.tobytes())
    assert out[0, :, 0].tolist() == [0, 0, 1, 128, 254, 255]


def test_cv_bridge_encodings_read_as_bgr8_and_mono8_with_a_note():
    np.testing.assert_array_equal(raw_to_rgb(*fields(SMOOTH, "8UC3")[:5]),
                                  raw_to_rgb(*fields(SMOOTH, "bgr8")[:5]))
    np.testing.assert_array_equal(raw_to_rgb(*fields(SMOOTH, "8UC1")[:5]),
                                  raw_to_rgb(*fields(SMOOTH, "mono8")[:5]))
    assert "read as bgr8" in alias_note("8UC3") and "read as mono8" in alias_note("8UC1")
    assert alias_note("bgr8") == "" and alias_note("bayer_rggb8") == ""


@pytest.mark.parametrize("reduce", [False, True])
@pytest.mark.parametrize("encoding", RAW_ENCODINGS)
def test_serialized_and_deserialized_messages_give_the_same_pixels(encoding, reduce):
    wide = encoding.endswith("16")
    name, height, width, step, data, big = fields(SMOOTH, encoding, big_endian=wide,
                                                  low_bits=wide)
    msg = Image(header=Header(stamp=seconds_to_stamp(1.7e9), frame_id="cam"), height=height,
                width=width, encoding=name, is_bigendian=big, step=step, data=data)
    buffer = serialize_message(msg)
    reducer = ImageReducer(MODEL) if reduce else None
    from_cdr = image_msg_to_rgb(read_image(*image_header(buffer)), reducer)
    np.testing.assert_array_equal(
        from_cdr, image_msg_to_rgb(deserialize_message(buffer, Image), reducer))
    assert from_cdr.shape == ((*MODEL, 3) if reduce else SMOOTH.shape)


@pytest.mark.parametrize("encoding", RAW_ENCODINGS)
def test_reduced_path_stays_near_the_model_resize_of_the_source(encoding):
    source = pair_constant(SMOOTH) if encoding in YUV_ENCODINGS else SMOOTH
    if layout_of(encoding).channels == 1:
        source = np.repeat(cv2.cvtColor(source, cv2.COLOR_RGB2GRAY)[:, :, None], 3, axis=2)
    reduced = raw_to_rgb(*fields(source, encoding), reducer=ImageReducer(MODEL))
    direct = resize_images(source[None], MODEL)[0].permute(1, 2, 0).numpy()  # [h, w, 3]
    bound = np.full(3, 4.0)
    if encoding in BAYER_ENCODINGS:
        bound += 0.5 * neighbour_spread(source).max()
    if encoding in YUV_ENCODINGS:
        bound += YUV_ROUNDING
    error = np.abs(reduced - direct)
    assert (error <= bound).all(), (error.reshape(-1, 3).max(0), bound)


def test_bayer_mosaic_has_one_channel_per_pixel():
    rgb = np.stack([np.full((2, 2), v, np.uint8) for v in (10, 20, 30)], axis=2)
    assert bayer_mosaic(rgb, "rggb").tolist() == [[10, 20], [20, 30]]
    assert bayer_mosaic(rgb, "gbrg").tolist() == [[20, 30], [10, 20]]
