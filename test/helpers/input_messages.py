"""Duck-typed messages for the drive node's InputHandler, and a stub engine that plans
straight ahead."""

from types import SimpleNamespace

import cv2
import numpy as np

from flashdrive_ros.engine.types import Plan
from flashdrive_ros.ros.convert import seconds_to_stamp

SPEED = 5.0
JPEG = cv2.imencode(".jpg", np.full((48, 64, 3), 90, np.uint8))[1].tobytes()


class StraightEngine:
    def step(self, window):
        return Plan(t0=window.t0, trajectories=np.zeros((1, 64, 3)), dt=0.1, coc_text="")

    def reset(self):
        pass

    def warmup(self):
        pass


def xyz(x=0.0, y=0.0, z=0.0, **w):
    return SimpleNamespace(x=x, y=y, z=z, **w)


def odometry(stamp, x):
    return SimpleNamespace(
        header=SimpleNamespace(stamp=seconds_to_stamp(stamp), frame_id="odom"),
        pose=SimpleNamespace(pose=SimpleNamespace(position=xyz(x), orientation=xyz(w=1.0))),
        twist=SimpleNamespace(twist=SimpleNamespace(linear=xyz(SPEED), angular=xyz())))


def image(stamp):
    return SimpleNamespace(header=SimpleNamespace(stamp=seconds_to_stamp(stamp), frame_id="c"),
                           format="jpeg", data=JPEG)


def input_fault(loop, name):
    _, inputs = loop.health()
    return next(h for h in inputs if h.name == name).last_fault

