"""A synthetic drive written as a rosbag2 with rosbags: cameras, odometry on a circle,
labels."""

import json
import math
from pathlib import Path

import cv2
import numpy as np
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import Stores, get_typestore

from flashdrive_ros.eval.topics import TopicMapping

TYPESTORE = get_typestore(Stores.ROS2_JAZZY)
T_START = 100.0
SPEED = 5.0
YAW_RATE = 0.2
START_YAW = 0.3
START_XY = (10.0, -5.0)


def ego_pose(t):
    """Unicycle on a circle: world (x, y, yaw) at bag time t."""
    tau = t - T_START
    yaw = START_YAW + YAW_RATE * tau
    radius = SPEED / YAW_RATE
    x = START_XY[0] + radius * (math.sin(yaw) - math.sin(START_YAW))
    y = START_XY[1] - radius * (math.cos(yaw) - math.cos(START_YAW))
    return x, y, yaw


def stamp_msg(t):
    ns = int(round(t * 1e9))
    return TYPESTORE.types["builtin_interfaces/msg/Time"](sec=ns // 10**9, nanosec=ns % 10**9)


def header_msg(t, frame="base_link"):
    return TYPESTORE.types["std_msgs/msg/Header"](stamp=stamp_msg(t), frame_id=frame)


def odometry_msg(t, frame="odom", offset=(0.0, 0.0)):
    ts = TYPESTORE.types
    x, y, yaw = ego_pose(t)
    pose = ts["geometry_msgs/msg/Pose"](
        position=ts["geometry_msgs/msg/Point"](x=x + offset[0], y=y + offset[1], z=0.0),
        orientation=ts["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=math.sin(yaw / 2),
                                                       w=math.cos(yaw / 2)))
    twist = ts["geometry_msgs/msg/Twist"](
        linear=ts["geometry_msgs/msg/Vector3"](x=SPEED, y=0.0, z=0.0),
        angular=ts["geometry_msgs/msg/Vector3"](x=0.0, y=0.0, z=YAW_RATE))
    return ts["nav_msgs/msg/Odometry"](
        header=header_msg(t, frame), child_frame_id="base_link",
        pose=ts["geometry_msgs/msg/PoseWithCovariance"](pose=pose, covariance=np.zeros(36)),
        twist=ts["geometry_msgs/msg/TwistWithCovariance"](twist=twist, covariance=np.zeros(36)))


def make_image(camera, frame, width, height):
    rng = np.random.default_rng(1000 * camera + frame)
    image = rng.integers(0, 255, (height, width, 3), dtype=np.uint8)
    image[: height // 2] = (40 * camera, 200, 10 * (frame % 20))
    return image


def image_msg(rgb, t, raw, corrupt=False):
    ts = TYPESTORE.types
    if raw:
        h, w = rgb.shape[:2]
        data = rgb.reshape(-1).copy()
        if corrupt:
            data = data[: data.size // 2]
        return ts["sensor_msgs/msg/Image"](header=header_msg(t, "cam"), height=h, width=w,
                                           encoding="rgb8", is_bigendian=0, step=w * 3,
                                           data=data)
    ok, jpeg = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    assert ok
    data = jpeg.reshape(-1) if not corrupt else np.frombuffer(b"not an image", np.uint8)
    return ts["sensor_msgs/msg/CompressedImage"](header=header_msg(t, "cam"), format="jpeg",
                                                 data=data)


def write_drive_bag(path, *, seconds=3.0, storage="mcap", raw=False, topics=None, width=64,
                    height=48, labels=True, corrupt_frames=(), skip_topics=(),
                    extra_topics=(), camera_latency=(), dropped_frames=(), sizes=(),
                    odom_frame="odom", odom_offset=(0.0, 0.0), foreign_topics=()):
    """Cameras at 10 Hz, odometry at 50 Hz on a circle, labels at 10 Hz, from T_START.
    corrupt_frames: (camera, frame index) pairs whose payload is broken; dropped_frames:
    (camera, frame index) pairs left out; camera_latency: per camera, seconds from stamp to
    log time; sizes: per camera (width, height) instead of width x height; foreign_topics:
    (topic, msgtype, definition text, type hash, CDR bytes) of topics recorded with that
    definition and hash, one message each."""
    topics = topics or TopicMapping()
    plugin = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}[storage]
    image_type = "sensor_msgs/msg/Image" if raw else "sensor_msgs/msg/CompressedImage"
    events = []
    for k in range(int(round(seconds * 50)) + 1):
        t = T_START + k * 0.02
        events.append((t, 0, topics.odometry, "nav_msgs/msg/Odometry",
                       odometry_msg(t, odom_frame, odom_offset)))
    for frame in range(int(round(seconds * 10)) + 1):
        t = T_START + frame * 0.1
        for cam, topic in enumerate(topics.cameras):
            if (cam, frame) in dropped_frames:
                continue
            size = sizes[cam] if sizes else (width, height)
            msg = image_msg(make_image(cam, frame, *size), t, raw,
                            (cam, frame) in corrupt_frames)
            latency = camera_latency[cam] if camera_latency else 0.0
            events.append((t + latency, 1 + cam, topic, image_type, msg))
        if labels and topics.labels:
            decision = "stop" if frame % 2 else "keep lane"
            text = json.dumps({"t": t, "coc": f"clear road, {decision}", "decision": decision,
                               "tags": ["red_light_stop"] if frame % 2 else ["keep_lane"]})
            events.append((t, 9, topics.labels, "std_msgs/msg/String",
                           TYPESTORE.types["std_msgs/msg/String"](data=text)))
    events += list(extra_topics)
    events.sort(key=lambda e: (e[0], e[1]))
    with Writer(Path(path), version=9, storage_plugin=plugin) as writer:
        for topic, msgtype, msgdef, digest, raw in foreign_topics:
            foreign = writer.add_connection(topic, msgtype, msgdef=msgdef, rihs01=digest)
            writer.write(foreign, int(T_START * 1e9), raw)
        connections = {}
        for t, _, topic, msgtype, msg in events:
            if topic in skip_topics:
                continue
            if topic not in connections:
                connections[topic] = writer.add_connection(topic, msgtype, typestore=TYPESTORE)
            writer.write(connections[topic], int(round(t * 1e9)),
                         TYPESTORE.serialize_cdr(msg, msgtype))
    return Path(path)
