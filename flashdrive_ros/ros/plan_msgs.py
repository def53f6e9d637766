"""Plan (engine output) -> nav_msgs/Path, visualization_msgs/MarkerArray, std_msgs/String."""

from __future__ import annotations

import colorsys
import math

import numpy as np
from geometry_msgs.msg import Point, PoseStamped, Quaternion
from nav_msgs.msg import Path
from std_msgs.msg import ColorRGBA, Header, String
from visualization_msgs.msg import Marker, MarkerArray

from flashdrive_ros.engine.types import Plan
from flashdrive_ros.ros.convert import seconds_to_stamp

MARKER_NAMESPACE = "trajectory_samples"
COC_NAMESPACE = "chain_of_causation"
COC_TEXT_HEIGHT_M = 0.5
COC_TEXT_Z_M = 3.0
FIRST_SAMPLE_WIDTH_M = 0.25
OTHER_SAMPLE_WIDTH_M = 0.1


def _check_plan(plan: Plan) -> np.ndarray:
    trajectories = np.asarray(plan.trajectories, dtype=np.float64)
    if trajectories.ndim != 3 or trajectories.shape[2] != 3 or trajectories.shape[0] < 1:
        raise ValueError(f"plan trajectories must be [K>=1, N_wp, 3], got "
                         f"{trajectories.shape}")
    if not np.isfinite(trajectories).all():
        raise ValueError("plan trajectories hold NaN or inf")
    if not (math.isfinite(plan.t0) and math.isfinite(plan.dt) and plan.dt > 0):
        raise ValueError(f"plan t0 {plan.t0} / dt {plan.dt} invalid")
    return trajectories


def yaw_to_quaternion(yaw: float) -> Quaternion:
    return Quaternion(x=0.0, y=0.0, z=math.sin(yaw / 2.0), w=math.cos(yaw / 2.0))


def plan_to_path(plan: Plan, frame_id: str) -> Path:
    """First trajectory sample as a Path in `frame_id`, stamped with the plan's input time;
    waypoint i is stamped t0 + (i + 1) * dt."""
    trajectory = _check_plan(plan)[0]  # [N_wp, 3]
    path = Path(header=Header(stamp=seconds_to_stamp(plan.t0), frame_id=frame_id))
    for i, (x, y, yaw) in enumerate(trajectory):
        pose = PoseStamped(header=Header(stamp=seconds_to_stamp(plan.t0 + (i + 1) * plan.dt),
                                         frame_id=frame_id))
        pose.pose.position = Point(x=float(x), y=float(y), z=0.0)
        pose.pose.orientation = yaw_to_quaternion(float(yaw))
        path.poses.append(pose)
    return path


def sample_color(index: int, count: int) -> ColorRGBA:
    """Sample 0 is green and opaque; the others spread over blue..magenta, translucent."""
    if index == 0:
        return ColorRGBA(r=0.1, g=0.9, b=0.2, a=1.0)
    hue = 0.55 + 0.3 * (index - 1) / max(count - 2, 1)
    r, g, b = colorsys.hsv_to_rgb(hue, 0.8, 1.0)
    return ColorRGBA(r=float(r), g=float(g), b=float(b), a=0.7)


def plan_to_markers(plan: Plan, frame_id: str) -> MarkerArray:
    """DELETEALL, then one LINE_STRIP per trajectory sample (id = sample index)."""
    trajectories = _check_plan(plan)
    header = Header(stamp=seconds_to_stamp(plan.t0), frame_id=frame_id)
    markers = MarkerArray()
    markers.markers.append(Marker(header=header, ns=MARKER_NAMESPACE, action=Marker.DELETEALL))
    count = trajectories.shape[0]
    for k, trajectory in enumerate(trajectories):
        marker = Marker(header=header, ns=MARKER_NAMESPACE, id=k, type=Marker.LINE_STRIP,
                        action=Marker.ADD)
        marker.pose.orientation.w = 1.0
        marker.scale.x = FIRST_SAMPLE_WIDTH_M if k == 0 else OTHER_SAMPLE_WIDTH_M
        marker.color = sample_color(k, count)
        marker.points = [Point(x=0.0, y=0.0, z=0.0)] + [
            Point(x=float(x), y=float(y), z=0.0) for x, y, _ in trajectory]
        markers.markers.append(marker)
    return markers


def plan_to_reasoning(plan: Plan) -> String:
    return String(data=plan.coc_text)


def plan_to_finished_plan(plan: Plan, frame_id: str) -> MarkerArray:
    """The whole plan in one message, stamped with its input time: the markers of
    `plan_to_markers` and the CoC as a TEXT_VIEW_FACING marker above the ego origin."""
    markers = plan_to_markers(plan, frame_id)
    text = Marker(header=markers.markers[0].header, ns=COC_NAMESPACE, id=0,
                  type=Marker.TEXT_VIEW_FACING, action=Marker.ADD, text=plan.coc_text)
    text.pose.position.z = COC_TEXT_Z_M
    text.pose.orientation.w = 1.0
    text.scale.z = COC_TEXT_HEIGHT_M
    text.color = ColorRGBA(r=1.0, g=1.0, b=1.0, a=1.0)
    markers.markers.append(text)
    return markers
