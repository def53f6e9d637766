"""Per-message cost of a camera image on arrival: decode and reduce to the model size
(ros/image_reduce.py), against the full-size decode it replaces and that decode followed by
the model's resize of the full image (what the encoder then did per frame). A second table
follows the serialized message (what a subscription receives): rclpy's deserialization then
decode and reduce, against the CDR read (ros/cdr_image.py) of a frame kept on the frame
grid and of one dropped on its stamp. Prints markdown tables.

    python scripts/image_cost.py [--repeat 20] [--model-size 80x128] [--sizes 1080x1920,...]
        [--encodings "raw bayer_rggb8,raw yuv422"]
"""

from __future__ import annotations

import argparse
import time

import cv2
import numpy as np
import torch

from flashdrive_ros.model.preprocess import resize_images
from flashdrive_ros.ros.cdr_image import image_header, read_compressed, read_image
from flashdrive_ros.ros.convert import decode_compressed, image_msg_to_rgb, raw_to_rgb
from flashdrive_ros.ros.image_reduce import ImageReducer
from flashdrive_ros.sim.drive import simulate
from flashdrive_ros.sim.frames import render_frames
from flashdrive_ros.sim.raw_pixels import raw_pixels

DRIVER_ENCODINGS = ("bayer_rggb8", "yuv422", "yuv422_yuy2", "rgb16", "mono16")

SIZES = ((1080, 1920), (720, 1280))


def median_ms(fn, repeat: int) -> float:
    """Median CPU time of the calling thread per call (robust to other processes sharing
    the cores)."""
    fn()
    times = []
    for _ in range(repeat):
        start = time.thread_time()
        fn()
        times.append(time.thread_time() - start)
    return float(np.median(times)) * 1000.0


def payloads(rgb: np.ndarray) -> dict[str, tuple]:
    """name -> (kind, fields) of one image in each encoding."""
    height, width = rgb.shape[:2]
    bgr = np.ascontiguousarray(rgb[:, :, ::-1])
    ok, jpeg = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, 90])
    ok, png = cv2.imencode(".png", bgr)
    return {
        "raw rgb8": ("raw", ("rgb8", height, width, width * 3, rgb.tobytes())),
        "raw bgr8": ("raw", ("bgr8", height, width, width * 3, bgr.tobytes())),
        "raw mono8": ("raw", ("mono8", height, width, width,
                              np.ascontiguousarray(rgb[:, :, 1]).tobytes())),
        **{f"raw {encoding}": ("raw", raw_fields(rgb, encoding)) for encoding in DRIVER_ENCODINGS},
        "JPEG q90": ("compressed", ("jpeg", jpeg.tobytes())),
        "PNG": ("compressed", ("png", png.tobytes())),
    }


def raw_fields(rgb: np.ndarray, encoding: str) -> tuple:
    """(encoding, height, width, step, data) of an Image in `encoding`."""
    data = np.ascontiguousarray(raw_pixels(rgb, encoding)).view(np.uint8)
    height, width = rgb.shape[:2]
    return encoding, height, width, data.size // height, data.tobytes()


def decode(kind: str, fields: tuple, reducer: ImageReducer | None) -> np.ndarray:
    if kind == "raw":
        return raw_to_rgb(*fields, reducer=reducer)
    return decode_compressed(*fields, reducer)


def serialized(kind: str, fields: tuple) -> bytes:
    """The CDR bytes of the sensor_msgs message carrying `fields`."""
    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import CompressedImage, Image

    if kind == "raw":
        encoding, height, width, step, data = fields
        return serialize_message(Image(height=height, width=width, encoding=encoding,
                                       step=step, data=data))
    fmt, data = fields
    return serialize_message(CompressedImage(format=fmt, data=data))


def serialized_costs(kind: str, fields: tuple, reducer: ImageReducer, repeat: int
                     ) -> tuple[int, float, float, float, float, float]:
    """(bytes, deserialize ms, deserialize + decode + reduce ms, copy of the bytes ms (what
    a raw take adds), CDR read + decode + reduce ms, header read ms) of one serialized
    message."""
    from rclpy.serialization import deserialize_message
    from sensor_msgs.msg import CompressedImage, Image

    buffer = serialized(kind, fields)
    message_type = Image if kind == "raw" else CompressedImage
    read = read_image if kind == "raw" else read_compressed

    def from_cdr():
        header, reader = image_header(buffer)
        return image_msg_to_rgb(read(header, reader), reducer)

    deserialize = median_ms(lambda: deserialize_message(buffer, message_type), repeat)
    before = median_ms(lambda: image_msg_to_rgb(deserialize_message(buffer, message_type),
                                                reducer), repeat)
    mutable = bytearray(buffer)
    return (len(buffer), deserialize, before, median_ms(lambda: bytes(mutable), repeat),
            median_ms(from_cdr, repeat), median_ms(lambda: image_header(buffer), repeat))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--model-size", default="80x128", help="HEIGHTxWIDTH of the model input")
    parser.add_argument("--sizes", default=",".join(f"{h}x{w}" for h, w in SIZES),
                        help="HEIGHTxWIDTH,... of the camera images")
    parser.add_argument("--encodings", default="", help="names of the table rows to measure, "
                        "comma-separated (default: all)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    model = tuple(int(v) for v in args.model_size.split("x"))
    sizes = [tuple(int(v) for v in size.split("x")) for size in args.sizes.split(",")]
    wanted = [name for name in args.encodings.split(",") if name]
    reducer = ImageReducer(model)
    scene = next(iter(render_frames(simulate(3, 1.0), 1920, 1080, count=1)))[1]
    print(f"model input {model[1]}x{model[0]}, 1 thread, median thread CPU time of "
          f"{args.repeat}\n")
    print("| image | encoding | message bytes | full decode ms | full decode + model resize ms "
          "| decode + reduce ms | kept bytes |")
    print("|---|---|---|---|---|---|---|")
    for height, width in sizes:
        rgb = cv2.resize(scene, (width, height), interpolation=cv2.INTER_AREA)
        for name, (kind, fields) in payloads(rgb).items():
            if wanted and name not in wanted:
                continue
            size = len(fields[-1])
            full = median_ms(lambda: decode(kind, fields, None), args.repeat)
            resized = median_ms(lambda: resize_images(decode(kind, fields, None)[None], model),
                                args.repeat)
            reduced = median_ms(lambda: decode(kind, fields, reducer), args.repeat)
            kept = decode(kind, fields, reducer).nbytes
            print(f"| {width}x{height} | {name} | {size} | {full:.2f} | {resized:.2f} | "
                  f"{reduced:.2f} | {kept} |")
    print("\n| image | encoding | CDR bytes | rclpy deserialize ms | deserialize + decode + "
          "reduce ms | bytes copy ms (raw take) | CDR read + decode + reduce ms (on the grid) "
          "| header read ms (off the grid) |")
    print("|---|---|---|---|---|---|---|---|")
    for height, width in sizes:
        rgb = cv2.resize(scene, (width, height), interpolation=cv2.INTER_AREA)
        for name, (kind, fields) in payloads(rgb).items():
            if wanted and name not in wanted:
                continue
            size, deserialize, before, copy, now, header = serialized_costs(
                kind, fields, reducer, args.repeat)
            print(f"| {width}x{height} | {name} | {size} | {deserialize:.2f} | {before:.2f} | "
                  f"{copy:.2f} | {now:.2f} | {header:.4f} |")


if __name__ == "__main__":
    main()
