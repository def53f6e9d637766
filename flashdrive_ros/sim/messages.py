"""Sim data as ROS 2 Jazzy messages (rosbags typestore classes, no rclpy needed), and one
vendor type a vehicle logger records besides (Autoware's velocity report), known only to this
typestore."""

from __future__ import annotations

import json

import numpy as np
from rosbags.typesys import Stores, get_types_from_msg, get_typestore

from flashdrive_ros.sim.cameras import CameraSpec
from flashdrive_ros.sim.labels import Label
from flashdrive_ros.sim.topics import BASE_FRAME, ODOM_FRAME, camera_frame

VELOCITY_REPORT_TYPE = "autoware_vehicle_msgs/msg/VelocityReport"
VELOCITY_REPORT_MSG = """std_msgs/Header header
float32 longitudinal_velocity
float32 lateral_velocity
float32 heading_rate
"""
COMPRESSED_VIDEO_TYPE = "foxglove_msgs/msg/CompressedVideo"
COMPRESSED_VIDEO_MSG = """builtin_interfaces/Time timestamp
string frame_id
uint8[] data
string format
"""
FFMPEG_PACKET_TYPE = "ffmpeg_image_transport_msgs/msg/FFMPEGPacket"
FFMPEG_PACKET_MSG = """std_msgs/Header header
int32 width
int32 height
string encoding
uint64 pts
uint8 flags
bool is_bigendian
uint8[] data
"""
TYPESTORE = get_typestore(Stores.ROS2_JAZZY)
TYPESTORE.register(get_types_from_msg(VELOCITY_REPORT_MSG, VELOCITY_REPORT_TYPE))
TYPESTORE.register(get_types_from_msg(COMPRESSED_VIDEO_MSG, COMPRESSED_VIDEO_TYPE))
TYPESTORE.register(get_types_from_msg(FFMPEG_PACKET_MSG, FFMPEG_PACKET_TYPE))
_T = TYPESTORE.types


def header(t_ns: int, frame_id: str):
    sec, nanosec = divmod(t_ns, 1_000_000_000)
    return _T["std_msgs/msg/Header"](
        stamp=_T["builtin_interfaces/msg/Time"](sec=sec, nanosec=nanosec), frame_id=frame_id)


def _quat_z(yaw: float):
    return _T["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=float(np.sin(yaw / 2)),
                                              w=float(np.cos(yaw / 2)))


def _vec(x: float, y: float, z: float):
    return _T["geometry_msgs/msg/Vector3"](x=float(x), y=float(y), z=float(z))


def compressed_image(t_ns: int, name: str, payload: bytes, fmt: str = "jpeg"):
    return _T["sensor_msgs/msg/CompressedImage"](
        header=header(t_ns, camera_frame(name)), format=fmt,
        data=np.frombuffer(payload, dtype=np.uint8))


def compressed_video(t_ns: int, name: str, payload: bytes, fmt: str):
    """foxglove_msgs/CompressedVideo: no header, its own timestamp and frame_id."""
    sec, nanosec = divmod(t_ns, 1_000_000_000)
    return _T[COMPRESSED_VIDEO_TYPE](
        timestamp=_T["builtin_interfaces/msg/Time"](sec=sec, nanosec=nanosec),
        frame_id=camera_frame(name), data=np.frombuffer(payload, dtype=np.uint8), format=fmt)


def ffmpeg_packet(t_ns: int, name: str, payload: bytes, encoder: str, width: int, height: int,
                  pts: int, keyframe: bool):
    """ffmpeg_image_transport_msgs/FFMPEGPacket: `encoding` names the FFmpeg encoder, flags
    bit 0 a keyframe."""
    return _T[FFMPEG_PACKET_TYPE](
        header=header(t_ns, camera_frame(name)), width=width, height=height, encoding=encoder,
        pts=pts, flags=int(keyframe), is_bigendian=False,
        data=np.frombuffer(payload, dtype=np.uint8))


def raw_image(t_ns: int, name: str, pixels: np.ndarray, encoding: str):
    """pixels: uint8 or uint16 [H, W, C] already in `encoding`'s layout ([H, W] for one
    channel); 16-bit samples are written little-endian."""
    height, width = pixels.shape[:2]
    channels = 1 if pixels.ndim == 2 else pixels.shape[2]
    samples = np.ascontiguousarray(pixels, dtype=pixels.dtype.newbyteorder("<"))
    return _T["sensor_msgs/msg/Image"](
        header=header(t_ns, camera_frame(name)), height=height, width=width, encoding=encoding,
        is_bigendian=0, step=width * channels * samples.itemsize,
        data=samples.reshape(-1).view(np.uint8))


def camera_info(t_ns: int, spec: CameraSpec, width: int, height: int):
    k = spec.intrinsics(width, height)
    p = np.zeros((3, 4))
    p[:, :3] = k
    roi = _T["sensor_msgs/msg/RegionOfInterest"](x_offset=0, y_offset=0, height=0, width=0,
                                                  do_rectify=False)
    return _T["sensor_msgs/msg/CameraInfo"](
        header=header(t_ns, camera_frame(spec.name)), height=height, width=width,
        distortion_model="plumb_bob", d=np.zeros(5), k=k.reshape(-1), r=np.eye(3).reshape(-1),
        p=p.reshape(-1), binning_x=0, binning_y=0, roi=roi)


def odometry(t_ns: int, x: float, y: float, yaw: float, v: float, yaw_rate: float,
             frame_id: str = ODOM_FRAME, z: float = 0.0):
    """Pose of base_link in `frame_id`; twist in base_link (forward speed, yaw rate)."""
    pose = _T["geometry_msgs/msg/Pose"](
        position=_T["geometry_msgs/msg/Point"](x=float(x), y=float(y), z=float(z)),
        orientation=_quat_z(yaw))
    cov = np.diag([0.01, 0.01, 0.01, 0.001, 0.001, 0.001]).reshape(-1)
    twist = _T["geometry_msgs/msg/Twist"](linear=_vec(v, 0.0, 0.0),
                                          angular=_vec(0.0, 0.0, yaw_rate))
    return _T["nav_msgs/msg/Odometry"](
        header=header(t_ns, frame_id), child_frame_id=BASE_FRAME,
        pose=_T["geometry_msgs/msg/PoseWithCovariance"](pose=pose, covariance=cov),
        twist=_T["geometry_msgs/msg/TwistWithCovariance"](twist=twist, covariance=cov.copy()))


def label_message(label: Label):
    return _T["std_msgs/msg/String"](data=json.dumps(label.to_dict(), sort_keys=True))


def camera_tf_static(t_ns: int, specs: tuple[CameraSpec, ...]):
    transforms = []
    for spec in specs:
        qx, qy, qz, qw = spec.quaternion_xyzw()
        transforms.append(_T["geometry_msgs/msg/TransformStamped"](
            header=header(t_ns, BASE_FRAME), child_frame_id=camera_frame(spec.name),
            transform=_T["geometry_msgs/msg/Transform"](
                translation=_vec(spec.x, spec.y, spec.z),
                rotation=_T["geometry_msgs/msg/Quaternion"](x=qx, y=qy, z=qz, w=qw))))
    return _T["tf2_msgs/msg/TFMessage"](transforms=transforms)


def ego_tf(t_ns: int, parent: str, x: float, y: float, z: float, yaw: float):
    """/tf message: base_link in `parent`."""
    return _T["tf2_msgs/msg/TFMessage"](transforms=[_T["geometry_msgs/msg/TransformStamped"](
        header=header(t_ns, parent), child_frame_id=BASE_FRAME,
        transform=_T["geometry_msgs/msg/Transform"](translation=_vec(x, y, z),
                                                    rotation=_quat_z(yaw)))])


def velocity_report(t_ns: int, v: float, yaw_rate: float):
    return _T[VELOCITY_REPORT_TYPE](header=header(t_ns, BASE_FRAME), longitudinal_velocity=v,
                                    lateral_velocity=0.0, heading_rate=yaw_rate)


def rosout_log(t_ns: int, node: str, text: str):
    sec, nanosec = divmod(t_ns, 1_000_000_000)
    return _T["rcl_interfaces/msg/Log"](
        stamp=_T["builtin_interfaces/msg/Time"](sec=sec, nanosec=nanosec), level=20, name=node,
        msg=text, file="logger.cpp", function="log", line=1)
