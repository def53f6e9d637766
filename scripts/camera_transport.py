"""What DDS alone delivers of a bag's camera topics: the bag player (ros/harness/bag_player.py, as
`flashdrive-replay --through-ros` plays) publishes them at their log times to a bare raw
subscriber in a child process that only counts; prints the messages received per camera and
the CPU seconds of both processes. The transport is the environment's (RMW_IMPLEMENTATION,
FASTRTPS_DEFAULT_PROFILES_FILE, FASTDDS_BUILTIN_TRANSPORTS).

    python scripts/camera_transport.py BAG --topics-yaml topics.yaml [--reliable]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time

import yaml

SUBSCRIBER = "--subscriber"


def subscribe(cameras: list[str], reliable: bool, seconds: float) -> None:
    """Counts the messages of each camera topic for `seconds`; prints a JSON line."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from sensor_msgs.msg import Image

    from flashdrive_ros.ros.inputs import camera_qos

    rclpy.init()
    node = Node("camera_transport_subscriber")
    counts = [0] * len(cameras)

    def count(index: int) -> None:
        counts[index] += 1

    for index, topic in enumerate(cameras):
        node.create_subscription(Image, topic, lambda _, i=index: count(i),
                                 camera_qos("reliable" if reliable else "best_effort"),
                                 raw=True)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    threading.Thread(target=executor.spin, daemon=True).start()
    start = time.process_time()
    time.sleep(seconds)
    print(json.dumps({"received": counts, "cpu_s": time.process_time() - start}), flush=True)
    os._exit(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("bag")
    parser.add_argument("--topics-yaml", required=True)
    parser.add_argument("--reliable", action="store_true",
                        help="reliable camera subscriptions (default: best effort)")
    parser.add_argument("--listen-s", type=float, default=60.0,
                        help="how long the subscriber counts")
    parser.add_argument(SUBSCRIBER, action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    cameras = list(yaml.safe_load(open(args.topics_yaml))["cameras"])
    if args.subscriber:
        subscribe(cameras, args.reliable, args.listen_s)
    child = subprocess.Popen([sys.executable, *sys.argv, SUBSCRIBER], stdout=subprocess.PIPE,
                             text=True)
    import rclpy
    from rclpy.node import Node

    from flashdrive_ros.ros.harness.bag_player import BagPlayer

    rclpy.init()
    node = Node("camera_transport_player")
    player = BagPlayer(node, args.bag, topics=cameras, publish_clock=False)
    unmatched = player.wait_for_subscribers(cameras, 30.0)
    if unmatched:
        raise SystemExit(f"no subscriber matched {unmatched}")
    start = time.process_time()
    stats = player.play()
    player_cpu = time.process_time() - start
    result = json.loads(child.communicate()[0].strip().splitlines()[-1])
    sent = {topic: 0 for topic in cameras}
    from rosbags.highlevel import AnyReader

    with AnyReader([player.bag]) as reader:
        for connection in reader.connections:
            if connection.topic in sent:
                sent[connection.topic] += connection.msgcount
    print(f"played {stats.messages} messages of {stats.bag_seconds:.1f} bag s in "
          f"{stats.wall_seconds:.1f} s (at most {stats.max_lateness_s:.1f} s late); player "
          f"CPU {player_cpu:.1f} s, subscriber CPU {result['cpu_s']:.1f} s")
    for topic, received in zip(cameras, result["received"]):
        print(f"  {topic}: {received} of {sent[topic]} received")


if __name__ == "__main__":
    main()
