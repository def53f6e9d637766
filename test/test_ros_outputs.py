"""OutputPublishers.tick on a real lifecycle node over DDS, with plans from the real engine on
a tiny model: the newest plan goes out on every tick stamped with its input time, ticks
without a new plan are counted, and a plan older than max_plan_age_s is not published as
valid."""

import threading
import time

import pytest
import torch
from helpers.planner_inputs import CAMERAS, feed
from helpers.tiny_model import make_tiny_model_dir
from nav_msgs.msg import Path
from rclpy.executors import SingleThreadedExecutor
from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn
from rclpy.node import Node

from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.engine.engine import Engine
from flashdrive_ros.engine.window import WindowBuilder
from flashdrive_ros.ros import names
from flashdrive_ros.ros.convert import stamp_to_seconds
from flashdrive_ros.ros.harness.loopback import local_context
from flashdrive_ros.ros.outputs import OutputPublishers
from flashdrive_ros.ros.params import DriveParams
from flashdrive_ros.ros.planner_loop import PlannerLoop

pytestmark = pytest.mark.ros

MAX_AGE_S = 0.5
WAIT_S = 10.0


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    torch.set_num_threads(1)
    model_dir = make_tiny_model_dir(tmp_path_factory.mktemp("model"))
    return Engine.load(model_dir, EngineConfig(speculative=False))


@pytest.fixture()
def graph():
    context = local_context()
    node = LifecycleNode("outputs_test", context=context)
    listener = Node("outputs_listener", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    executor.add_node(listener)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    yield node, listener
    executor.shutdown()
    node.destroy_node()
    listener.destroy_node()
    context.shutdown()
    spinner.join(timeout=5.0)


def test_newest_plan_every_tick_with_its_input_stamp_and_skipped_ticks_counted(engine, graph):
    node, listener = graph
    params = DriveParams(max_plan_age_s=MAX_AGE_S, overlay_camera="")
    outputs = OutputPublishers(node, params, num_waypoints=64, dt=0.1)
    assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
    assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
    paths = []
    listener.create_subscription(Path, names.resolved(names.TRAJECTORY_TOPIC, "/",
                                                      "outputs_test"), paths.append, 10)
    deadline = time.monotonic() + WAIT_S
    while outputs.trajectory.get_subscription_count() < 1:
        assert time.monotonic() < deadline, "~/trajectory subscriber never matched"
        time.sleep(0.02)

    engine.reset()
    loop = PlannerLoop(engine, WindowBuilder(len(CAMERAS)), CAMERAS)
    outputs.tick(loop, 11.0, 0.0)
    feed(loop, 10.0, 11.6)
    assert loop.run_once()
    for now in (11.65, 11.75, 11.6 + MAX_AGE_S + 0.05):
        outputs.tick(loop, now, now)
    feed(loop, 11.62, 11.7)
    assert loop.run_once()
    outputs.tick(loop, 11.8, 11.8)

    deadline = time.monotonic() + WAIT_S
    while len(paths) < 5:
        assert time.monotonic() < deadline, f"{len(paths)} of 5 Paths arrived"
        time.sleep(0.02)
    published = [(round(stamp_to_seconds(p.header.stamp), 6), len(p.poses)) for p in paths]
    assert published == [(11.0, 0), (11.6, 64), (11.6, 64), (12.15, 0), (11.7, 64)]
    assert (outputs.ticks, outputs.skipped_ticks, outputs.consecutive_skipped) == (5, 3, 0)
    planner, _ = loop.health()
    assert planner.windows_planned == 2
