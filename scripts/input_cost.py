"""CPU the drive node's camera callbacks spend on a bag's image messages, in this process
without DDS: each stored CDR message goes to the InputHandler as a raw subscription hands it
(serialized_images) or deserialized by rclpy first, with the frame gate on or off. Prints
the thread CPU per message and per second of bag as a markdown table.

    python scripts/input_cost.py BAG --topics-yaml topics.yaml [--model-size 80x128]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import cv2
import torch
import yaml
from rclpy.serialization import deserialize_message
from rosbags.highlevel import AnyReader
from rosbags.typesys import Stores, get_typestore
from sensor_msgs.msg import CompressedImage, Image

from flashdrive_ros.engine.window import WindowBuilder
from flashdrive_ros.ros.input_handler import InputHandler
from flashdrive_ros.ros.params import DriveParams
from flashdrive_ros.ros.planner_loop import PlannerLoop

VARIANTS = ((False, False), (True, False), (False, True), (True, True))


class NoEngine:
    def reset(self) -> None:
        pass


def camera_messages(bag: Path, cameras: list[str]):
    """(camera index, CDR bytes, message type) of the bag's camera messages in log order,
    read one at a time."""
    with AnyReader([bag], default_typestore=get_typestore(Stores.ROS2_JAZZY)) as reader:
        connections = [c for c in reader.connections if c.topic in cameras]
        for connection, _, raw in reader.messages(connections=connections):
            yield cameras.index(connection.topic), bytes(raw), connection.msgtype


def run(bag: Path, cameras: list[str], size, serialized: bool, gate: bool
        ) -> tuple[float, int, int, str]:
    """(thread CPU seconds in the handler, messages, frames dropped by the gate, message
    type) of one pass over the bag."""
    cpu, count, handler = 0.0, 0, None
    for index, buffer, msgtype in camera_messages(bag, cameras):
        if handler is None:
            transport = "raw" if msgtype == "sensor_msgs/msg/Image" else "compressed"
            params = DriveParams(camera_topics=cameras, image_transport=transport,
                                 serialized_images=serialized, frame_gate=gate,
                                 overlay_camera="")
            loop = PlannerLoop(NoEngine(), WindowBuilder(len(params.camera_names)),
                               params.camera_names)
            handler = InputHandler(params, loop, size, frame_gate=gate)
            message_type = Image if transport == "raw" else CompressedImage
        start = time.thread_time()
        if serialized:
            handler.on_serialized_image(index, buffer)
        else:
            handler.on_image(index, deserialize_message(buffer, message_type))
        cpu += time.thread_time() - start
        count += 1
    if handler is None:
        raise SystemExit(f"{bag} has no message on {cameras}")
    return cpu, count, sum(handler.gate.dropped) if gate else 0, msgtype


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("bag", type=Path)
    parser.add_argument("--topics-yaml", type=Path, required=True)
    parser.add_argument("--model-size", default="80x128", help="HEIGHTxWIDTH of the model input")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    size = tuple(int(v) for v in args.model_size.split("x"))
    cameras = list(yaml.safe_load(args.topics_yaml.read_text())["cameras"])
    with AnyReader([args.bag], default_typestore=get_typestore(Stores.ROS2_JAZZY)) as reader:
        seconds = (reader.end_time - reader.start_time) * 1e-9
    rows = [(serialized, gate, *run(args.bag, cameras, size, serialized, gate))
            for serialized, gate in VARIANTS]
    print(f"{rows[0][3]} {rows[0][5]} messages over {seconds:.1f} s of bag, model input "
          f"{size[1]}x{size[0]}, one thread\n")
    print("| serialized_images | frame_gate | thread CPU s | ms per message | CPU share of one "
          "core | frames dropped on their stamp |")
    print("|---|---|---|---|---|---|")
    for serialized, gate, cpu, count, dropped, _ in rows:
        print(f"| {str(serialized).lower()} | {str(gate).lower()} | {cpu:.2f} | "
              f"{1000 * cpu / count:.2f} | {cpu / seconds:.3f} | {dropped} |")


if __name__ == "__main__":
    main()
