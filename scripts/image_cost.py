"""Per-message cost of a camera image on arrival: decode and reduce to the model size
(ros/image_reduce.py), against the full-size decode it replaces and that decode followed by
the model's resize of the full image (what the encoder then did per frame). Prints a
markdown table.

    python scripts/image_cost.py [--repeat 20] [--model-size 80x128]
"""

from __future__ import annotations

import argparse
import time

import cv2
import numpy as np
import torch

from flashdrive_ros.model.preprocess import resize_images
from flashdrive_ros.ros.convert import decode_compressed, raw_to_rgb
from flashdrive_ros.ros.image_reduce import ImageReducer
from flashdrive_ros.sim.drive import simulate
from flashdrive_ros.sim.frames import render_frames

SIZES = ((1080, 1920), (720, 1280))


def median_ms(fn, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
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
        "JPEG q90": ("compressed", ("jpeg", jpeg.tobytes())),
        "PNG": ("compressed", ("png", png.tobytes())),
    }


def decode(kind: str, fields: tuple, reducer: ImageReducer | None) -> np.ndarray:
    if kind == "raw":
        return raw_to_rgb(*fields, reducer=reducer)
    return decode_compressed(*fields, reducer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--model-size", default="80x128", help="HEIGHTxWIDTH of the model input")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    model = tuple(int(v) for v in args.model_size.split("x"))
    reducer = ImageReducer(model)
    scene = next(iter(render_frames(simulate(3, 1.0), 1920, 1080, count=1)))[1]
    print(f"model input {model[1]}x{model[0]}, 1 thread, median of {args.repeat}\n")
    print("| image | encoding | message bytes | full decode ms | full decode + model resize ms "
          "| decode + reduce ms | kept bytes |")
    print("|---|---|---|---|---|---|---|")
    for height, width in SIZES:
        rgb = cv2.resize(scene, (width, height), interpolation=cv2.INTER_AREA)
        for name, (kind, fields) in payloads(rgb).items():
            size = len(fields[-1])
            full = median_ms(lambda: decode(kind, fields, None), args.repeat)
            resized = median_ms(lambda: resize_images(decode(kind, fields, None)[None], model),
                                args.repeat)
            reduced = median_ms(lambda: decode(kind, fields, reducer), args.repeat)
            kept = decode(kind, fields, reducer).nbytes
            print(f"| {width}x{height} | {name} | {size} | {full:.2f} | {resized:.2f} | "
                  f"{reduced:.2f} | {kept} |")


if __name__ == "__main__":
    main()
