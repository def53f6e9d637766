"""BagPlayer and PlanRecorder over real DDS on loopback, and LifecycleClient against a real
rclpy lifecycle node."""

import os
import threading
import time
from types import SimpleNamespace

import pytest
from helpers.bags import T_START, TYPESTORE, write_drive_bag
from helpers.foreign_topics import FOREIGN, UNREADABLE
from lifecycle_msgs.msg import Transition
from lifecycle_msgs.srv import ChangeState, GetState
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.executors import MultiThreadedExecutor
from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn
from rclpy.node import Node
from rosbags.highlevel import AnyReader
from rosgraph_msgs.msg import Clock

from flashdrive_ros.eval.topics import TopicMapping
from flashdrive_ros.ros.harness.bag_player import BagPlayer
from flashdrive_ros.ros.harness.lifecycle_client import RESEND_S, LifecycleClient, LifecycleError
from flashdrive_ros.ros.harness.loopback import local_context
from flashdrive_ros.ros.harness.plan_recorder import PlanRecorder, SessionSettings, _drain

pytestmark = pytest.mark.ros


@pytest.fixture
def ros():
    context = local_context()
    executor = MultiThreadedExecutor(context=context)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    yield context, executor
    executor.shutdown()
    context.shutdown()
    spinner.join(timeout=5)


def stored_messages(path):
    with AnyReader([path], default_typestore=TYPESTORE) as reader:
        return [(c.topic, bytes(raw)) for c, _, raw in reader.messages()]


def test_player_publishes_stored_bytes_and_recorder_writes_them(tmp_path, ros):
    context, executor = ros
    topics = TopicMapping()
    bag = write_drive_bag(tmp_path / "in", seconds=0.4)
    player_node = Node("player", context=context)
    recorder_node = Node("recorder", context=context)
    for node in (player_node, recorder_node):
        executor.add_node(node)
    clocks = []
    recorder_node.create_subscription(Clock, "/clock", lambda m: clocks.append(m.clock), 100)
    player = BagPlayer(player_node, bag, rate=4.0)
    recorded_topics = {topics.odometry: "nav_msgs/msg/Odometry",
                       topics.cameras[0]: "sensor_msgs/msg/CompressedImage",
                       topics.labels: "std_msgs/msg/String"}
    recorder = PlanRecorder(recorder_node, tmp_path / "out", recorded_topics)
    assert recorder.subscribe_when_published(list(recorded_topics), 10.0) == []
    assert recorder.wait_matched(10.0) == []
    assert player.wait_for_subscribers(list(recorded_topics), 10.0) == []
    stats = player.play()
    expected = [m for m in stored_messages(bag) if m[0] in recorded_topics]
    deadline = time.monotonic() + 10
    while sum(recorder.counts.values()) < len(expected) and time.monotonic() < deadline:
        time.sleep(0.02)
    recorder.close()
    assert stats.messages == len(stored_messages(bag))
    assert stats.bag_seconds == pytest.approx(0.4)
    assert stats.wall_seconds >= 0.4 / 4.0
    assert sorted(stored_messages(tmp_path / "out")) == sorted(expected)
    assert clocks and clocks[0].sec + clocks[0].nanosec * 1e-9 == pytest.approx(T_START)


def test_player_reports_topics_nobody_subscribes(tmp_path, ros):
    context, executor = ros
    lonely = f"/lonely_{os.getpid()}"
    topics = TopicMapping(cameras=tuple(f"{lonely}/cam{i}" for i in range(4)),
                          odometry=f"{lonely}/odom", labels=None)
    bag = write_drive_bag(tmp_path / "in", seconds=0.2, topics=topics, labels=False)
    node = Node("lonely_player", context=context)
    executor.add_node(node)
    player = BagPlayer(node, bag, topics=[topics.odometry])
    assert list(player.publishers) == [topics.odometry]
    assert player.wait_for_subscribers([topics.odometry], 0.3) == [topics.odometry]


def test_player_leaves_topics_it_cannot_type_or_publish_unplayed(tmp_path, ros):
    context, executor = ros
    bag = write_drive_bag(tmp_path / "in", seconds=0.2, foreign_topics=FOREIGN)
    node = Node("logger_bag_player", context=context)
    executor.add_node(node)
    player = BagPlayer(node, bag)
    assert {t: player.unplayable[t] for t in UNREADABLE} == UNREADABLE
    assert player.unplayable["/vehicle/status"].startswith("custom_msgs/msg/Status: ")
    assert set(TopicMapping().cameras) | {TopicMapping().odometry} <= set(player.publishers)
    assert not set(player.publishers) & set(player.unplayable)


class Managed(LifecycleNode):
    def __init__(self, context, fail_activate):
        super().__init__("managed", context=context)
        self.fail_activate = fail_activate

    def on_configure(self, state):
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state):
        if self.fail_activate:
            return TransitionCallbackReturn.FAILURE
        return super().on_activate(state)


@pytest.mark.parametrize("fail_activate", [False, True])
def test_lifecycle_client_drives_a_lifecycle_node(ros, fail_activate):
    context, executor = ros
    managed = Managed(context, fail_activate)
    client_node = Node("controller", context=context)
    executor.add_node(managed)
    executor.add_node(client_node)
    client = LifecycleClient(client_node, "/managed")
    assert client.state() == "unconfigured"
    client.transition(Transition.TRANSITION_CONFIGURE, 10.0)
    assert client.state() == "inactive"
    if fail_activate:
        with pytest.raises(LifecycleError, match="transition 3 failed"):
            client.transition(Transition.TRANSITION_ACTIVATE, 10.0)
    else:
        client.transition(Transition.TRANSITION_ACTIVATE, 10.0)
        assert client.state() == "active"


def test_lifecycle_client_names_a_missing_node(ros):
    context, executor = ros
    node = Node("controller2", context=context)
    executor.add_node(node)
    with pytest.raises(LifecycleError, match="/nobody/change_state to appear did not happen"):
        LifecycleClient(node, "/nobody").transition(Transition.TRANSITION_CONFIGURE, 0.3)


class LifecycleServices:
    """`/<name>/get_state` and `/<name>/change_state` served by a plain node that logs the
    requests in arrival order and holds its first get_state answer until `release` is set
    (an answer that does not come, as when DDS drops it)."""

    def __init__(self, context, name):
        self.node = Node(name, context=context)
        self.requests = []
        self.release = threading.Event()
        group = ReentrantCallbackGroup()
        self.node.create_service(GetState, f"/{name}/get_state", self._get_state,
                                 callback_group=group)
        self.node.create_service(ChangeState, f"/{name}/change_state", self._change_state,
                                 callback_group=group)

    def _get_state(self, request, response):
        self.requests.append("get_state")
        if self.requests.count("get_state") == 1:
            self.release.wait(10.0)
        response.current_state.label = "unconfigured"
        return response

    def _change_state(self, request, response):
        self.requests.append("change_state")
        response.success = True
        return response


def test_lifecycle_client_asks_get_state_again_and_transitions_after_its_answer(ros):
    context, executor = ros
    server = LifecycleServices(context, "held")
    client_node = Node("controller3", context=context)
    executor.add_node(server.node)
    executor.add_node(client_node)
    client = LifecycleClient(client_node, "/held")
    try:
        start = time.monotonic()
        client.transition(Transition.TRANSITION_CONFIGURE, 10.0)
        assert time.monotonic() - start < RESEND_S + 2.0
        assert server.requests[:3] == ["get_state", "get_state", "change_state"]
    finally:
        server.release.set()


def test_drain_waits_for_a_first_plan_then_for_quiet():
    clocks = []
    player = SimpleNamespace(publish_clock=clocks.append)
    recorder = SimpleNamespace(counts={"plans": 0}, last_receipt={"plans": time.monotonic()})
    settings = SessionSettings(drain_quiet_s=0.1, drain_timeout_s=0.6)
    start = time.monotonic()
    _drain(recorder, player, 10.0, "plans", settings)
    assert time.monotonic() - start >= 0.6
    assert clocks[0] >= 10.0 and clocks == sorted(clocks)
    recorder.counts["plans"] = 1
    start = time.monotonic()
    _drain(recorder, player, 10.0, "plans", settings)
    assert 0.1 <= time.monotonic() - start < 0.5
