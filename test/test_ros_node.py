"""drive_node over real DDS on loopback, with the real engine on a tiny model."""

import math
import threading
import time
from dataclasses import dataclass

import cv2
import numpy as np
import pytest
import torch
from diagnostic_msgs.msg import DiagnosticArray
from helpers.spinning import SpinningApart
from helpers.tiny_model import make_tiny_model_dir
from lifecycle_msgs.msg import State, Transition
from lifecycle_msgs.srv import ChangeState, GetState
from nav_msgs.msg import Odometry, Path
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import ReliabilityPolicy
from sensor_msgs.msg import CameraInfo, CompressedImage, Image
from std_msgs.msg import String
from visualization_msgs.msg import Marker, MarkerArray

from flashdrive_ros.engine.types import STAGES
from flashdrive_ros.engine.window import WindowLimits
from flashdrive_ros.ros import names
from flashdrive_ros.ros.convert import seconds_to_stamp, stamp_to_seconds
from flashdrive_ros.ros.harness.loopback import local_context
from flashdrive_ros.ros.node import DriveNode
from flashdrive_ros.ros.params import DriveParams

pytestmark = [pytest.mark.ros, pytest.mark.timeout(240)]

CAMERAS = DriveParams().camera_names
SPEED = 5.0
WAIT_S = 30.0
NUM_SAMPLES = 2
LIMITS = WindowLimits()
FRAME_DT = 0.1
WINDOW_SPAN_S = 3 * FRAME_DT
HISTORY_SPAN_S = 1.5


def wait_for(predicate, timeout=WAIT_S, what="condition", detail=None):
    """Waits until `predicate()`; on timeout fails naming `what` and `detail()`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}"
                         + (f"; {detail()}" if detail else ""))


def jpeg(seed):
    rgb = np.random.default_rng(seed).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    ok, buf = cv2.imencode(".jpg", rgb)
    assert ok
    return buf.tobytes()


@dataclass(frozen=True)
class PublishedSet:
    """A camera set the feeder published; skip_camera published nothing, corrupt_camera a
    truncated JPEG."""

    stamp: float
    skip_camera: int | None
    corrupt_camera: int | None

    @property
    def complete(self):
        return self.skip_camera is None and self.corrupt_camera is None


def spoiled_t0_ranges(sets):
    """t0 ranges of the windows that would take a frame of an incomplete set: a window at t0
    takes frames at t0 - 0.3 s .. t0, each within the frame tolerance (a missing one is stood
    in by the camera's nearest frame, counted as frame_stand_ins)."""
    tolerance = LIMITS.frame_tolerance
    return [(s.stamp - tolerance, s.stamp + WINDOW_SPAN_S + tolerance)
            for s in sets if not s.complete]


def values_of(status):
    return {kv.key: kv.value for kv in status.values}


def decoded_rgb(data):
    return cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)[:, :, ::-1]


class StampGrid:
    """A 0.1 s stamp grid that follows `clock`: `next()` waits until the clock reaches the next
    stamp and returns it; when publishing falls more than 0.3 s behind the clock (the test
    waited, or the process stalled) the grid jumps up to the clock, so stamps never drift
    behind it and plans are never too old to be valid."""

    def __init__(self, clock):
        self.clock = clock
        self.stamp = None

    def now(self):
        return self.clock.now().nanoseconds * 1e-9

    def upcoming(self):
        if self.stamp is None or self.now() - self.stamp > 0.3:
            self.stamp = round(self.now(), 1) + 0.1
        return self.stamp

    def next(self):
        stamp = self.upcoming()
        while self.now() < stamp:
            time.sleep(0.005)
        self.stamp = round(stamp + FRAME_DT, 6)
        return stamp


class Feeder:
    """The test's side of the graph: publishes cameras and odometry, records outputs."""

    def __init__(self, context):
        self.node = Node("feeder", context=context)
        self.images = [self.node.create_publisher(CompressedImage, t, 10)
                       for t in DriveParams().camera_topics]
        self.info = self.node.create_publisher(
            CameraInfo, DriveParams().camera_info_topics[CAMERAS.index(
                DriveParams().overlay_camera)], 10)
        self.odom = self.node.create_publisher(Odometry, DriveParams().odom_topic, 50)
        self.paths, self.reasoning, self.diagnostics, self.overlays = [], [], [], []
        self.samples = []
        self.lock = threading.Lock()
        for msg_type, topic, store in [
                (Path, names.TRAJECTORY_TOPIC, self.paths),
                (MarkerArray, names.SAMPLES_TOPIC, self.samples),
                (String, names.REASONING_TOPIC, self.reasoning),
                (DiagnosticArray, names.DIAGNOSTICS_TOPIC, self.diagnostics),
                (Image, names.OVERLAY_TOPIC, self.overlays)]:
            self.node.create_subscription(msg_type, names.resolved(topic),
                                          lambda m, s=store: self._store(s, m), 10)
        self.get_state = self.node.create_client(GetState, "/drive_node/get_state")
        self.change_state = self.node.create_client(ChangeState, "/drive_node/change_state")
        self.grid = StampGrid(self.node.get_clock())
        self.last_stamp = None
        self.offset = 0.0
        self.payload = [jpeg(i) for i in range(len(CAMERAS))]
        self.sets = []

    def _store(self, store, msg):
        with self.lock:
            store.append((time.monotonic(), msg))

    def odometry(self, stamp, x, bad=False):
        msg = Odometry()
        msg.header.stamp = seconds_to_stamp(stamp)
        msg.header.frame_id = "odom"
        msg.pose.pose.position.x = float("nan") if bad else x
        msg.pose.pose.orientation.w = 1.0
        msg.twist.twist.linear.x = SPEED
        self.odom.publish(msg)

    def drive(self, seconds=0.0, skip_camera=None, corrupt_camera=None, nan_odometry_set=None,
              rewind_s=None, until=None, what="condition"):
        """Publish camera sets on a 0.1 s stamp grid and odometry at 0.02 s spacing up to each
        set's stamp for `seconds`, then on until `until()` holds (an AssertionError after
        WAIT_S more), so that the node keeps getting input while the test waits for its
        answer. The grid follows the clock (StampGrid). Odometry
        runs along x = SPEED * stamp, so wall-clock stamps put it near 1e10 m.

        nan_odometry_set: the odometry sample 0.04 s before the stamp of this drive's set
        with that index is NaN; the drive does not end before that set is out, whatever
        stamps a jump skipped. Returns the NaN sample's stamp.
        rewind_s: from this drive on, stamps are shifted back so that its first set lies
        rewind_s before the last set published (stamps go backwards however long the test
        waited), and they stay on that time base, as when a recording restarts: going
        forward again by up to rewind_s plus any stall of the feeder could cross the
        node's forward-jump limit, and a second time-base reset before the planner
        looked would be reported instead of the backwards one."""
        end = time.monotonic() + seconds
        if rewind_s is not None:
            self.offset = self.last_stamp - rewind_s - self.grid.upcoming()
        nan_odometry_at = None
        published = 0
        while (time.monotonic() < end
               or (nan_odometry_set is not None and published <= nan_odometry_set)
               or (until is not None and not until())):
            if time.monotonic() > end + WAIT_S:
                raise AssertionError(f"timed out after {WAIT_S} s of driving waiting for {what}")
            stamp = self.grid.next() + self.offset
            for k in range(5):
                t = stamp - 0.08 + 0.02 * k
                bad = published == nan_odometry_set and k == 2
                if bad:
                    nan_odometry_at = t
                self.odometry(t, SPEED * t, bad=bad)
            for i, publisher in enumerate(self.images):
                if i == skip_camera:
                    continue
                data = self.payload[i]
                if i == corrupt_camera:
                    data = data[: len(data) // 3]
                publisher.publish(CompressedImage(
                    header=self._header(stamp, CAMERAS[i]), format="jpeg", data=data))
            self.sets.append(PublishedSet(stamp, skip_camera, corrupt_camera))
            self.last_stamp = stamp
            published += 1
        return nan_odometry_at

    @staticmethod
    def _header(stamp, frame):
        from std_msgs.msg import Header
        return Header(stamp=seconds_to_stamp(stamp), frame_id=frame)

    def camera_subscribers(self):
        """Camera topic -> the nodes the DDS graph shows subscribed to it."""
        return {t: sorted(f"{i.node_namespace.rstrip('/')}/{i.node_name}"
                          for i in self.node.get_subscriptions_info_by_topic(t))
                for t in DriveParams().camera_topics}

    def node_subscribed(self):
        """Per camera topic, whether drive_node is subscribed to it."""
        return [f"/{names.NODE_NAME}" in nodes for nodes in self.camera_subscribers().values()]

    def transition(self, transition_id):
        assert self.change_state.wait_for_service(timeout_sec=WAIT_S)
        future = self.change_state.call_async(
            ChangeState.Request(transition=Transition(id=transition_id)))
        wait_for(future.done, what=f"lifecycle transition {transition_id}")
        return future.result().success

    def state(self):
        assert self.get_state.wait_for_service(timeout_sec=WAIT_S)
        future = self.get_state.call_async(GetState.Request())
        wait_for(future.done, what="get_state")
        return future.result().current_state.id

    def planner_statuses(self):
        return [s for _, s in self.timed_planner_statuses()]

    def timed_planner_statuses(self):
        """(receipt time, planner DiagnosticStatus) in arrival order."""
        with self.lock:
            arrays = list(self.diagnostics)
        return [(t, s) for t, a in arrays for s in a.status if s.name.endswith(": planner")]

    def input_faults(self):
        with self.lock:
            arrays = [m for _, m in self.diagnostics]
        return [s.message for a in arrays for s in a.status
                if ": input " in s.name and s.message != "ok"]

    def valid_paths(self, after=0.0):
        with self.lock:
            return [(t, m) for t, m in self.paths if t >= after and m.poses]


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    torch.set_num_threads(1)
    return make_tiny_model_dir(tmp_path_factory.mktemp("model"))


@pytest.fixture(scope="module")
def graph(tiny_model_dir):
    """The node and the feeder in this process, each on an executor thread of its own
    (SpinningApart); the node with one planner thread and act_apart off: a second OpenMP
    thread or the actor thread keeps the two cores
    of a CI machine busy, and then the feeder's publishing stalls by seconds (stamps jump,
    inputs fall silent), which is not the node's doing. The node with act_apart on and
    the default thread count runs in its own process in test_eval_through_ros.py and
    test_reliability_ros.py."""
    context = local_context()
    node = DriveNode(context=context, parameter_overrides=[
        Parameter("model_dir", value=str(tiny_model_dir)),
        Parameter("max_plan_age_s", value=3.0),
        Parameter("device", value="cpu"),
        Parameter("cpu_threads", value=1),
        Parameter("act_apart", value=False),
        Parameter("num_samples", value=NUM_SAMPLES),
        Parameter("overlay_intrinsics", value=[50.0, 50.0, 32.0, 24.0]),
        Parameter("overlay_extrinsic", value=[1.5, 0.0, 1.5, 0.0, 0.15, 0.0])])
    feeder = Feeder(context)
    spinning = SpinningApart(context, node, feeder.node)
    yield node, feeder
    node.release_all()
    spinning.stop()
    node.destroy_node()
    feeder.node.destroy_node()
    context.shutdown()


def test_configure_activate_plan_and_recover_from_faults(graph):
    node, feeder = graph
    assert feeder.state() == State.PRIMARY_STATE_UNCONFIGURED
    assert feeder.transition(Transition.TRANSITION_CONFIGURE)
    assert feeder.state() == State.PRIMARY_STATE_INACTIVE
    assert feeder.transition(Transition.TRANSITION_ACTIVATE)
    wait_for(lambda: all(feeder.node_subscribed())
             and all(p.get_subscription_count() >= 1 for p in feeder.images)
             and feeder.odom.get_subscription_count() >= 1, what="node subscriptions")
    wait_for(lambda: node.count_subscribers(names.resolved(names.OVERLAY_TOPIC)) >= 1,
             what="overlay subscriber matched")
    for topic in DriveParams().camera_topics:
        qos = [i.qos_profile for i in feeder.node.get_subscriptions_info_by_topic(topic)
               if i.node_name == names.NODE_NAME]
        assert qos and all(q.reliability == ReliabilityPolicy.BEST_EFFORT for q in qos)

    active_from = time.monotonic()
    feeder.drive(2.5, until=lambda: feeder.valid_paths() and feeder.reasoning and feeder.overlays
                 and any(s.message == "planning" for s in feeder.planner_statuses()),
                 what="a plan with its reasoning, overlay and planning status")
    feeder.drive(1.0)
    planning_until = time.monotonic()
    planner = values_of(feeder.planner_statuses()[-1])
    assert planner["cpu_threads"] == "1" and planner["act_apart"] == "False"
    assert node.encoder.encoded >= 1 and len(node.engine.encoded_frames) >= 1
    assert {f"latency_ms.{stage}" for stage in STAGES} <= set(planner)
    assert float(planner["accepted_length_mean"]) >= 1.0
    assert 0.0 <= float(planner["plan_age_s"]) <= 3.0
    ticks, skipped = int(planner["ticks"]), int(planner["skipped_ticks"])
    assert 1 <= skipped < ticks and ticks - skipped <= int(planner["windows_planned"])
    inputs = {s.name.split(": input ")[1] for a in [m for _, m in feeder.diagnostics]
              for s in a.status if ": input " in s.name}
    assert inputs == {*CAMERAS, "odometry"}

    with feeder.lock:
        received = [t for t, _ in feeder.paths if active_from <= t <= planning_until]
    intervals = np.diff(received)
    print(f"~/trajectory: {len(received)} in {planning_until - active_from:.2f} s, interval "
          f"median {np.median(intervals):.3f} s")
    assert np.median(intervals) == pytest.approx(0.1, abs=0.03)
    assert len(received) >= 0.6 * (received[-1] - received[0]) / 0.1

    _, path = feeder.valid_paths()[-1]
    assert len(path.poses) == 64 and path.header.frame_id == "base_link"
    assert all(math.isfinite(p.pose.position.x) for p in path.poses)
    with feeder.lock:
        samples = [m for _, m in feeder.samples if len(m.markers) > 1]
    strips = [m for m in samples[-1].markers if m.type == Marker.LINE_STRIP]
    assert samples[-1].markers[0].action == Marker.DELETEALL and len(strips) == NUM_SAMPLES
    assert all(m.header.frame_id == "base_link" and len(m.points) == 65 for m in strips)
    path_stamps = {stamp_to_seconds(m.header.stamp) for _, m in feeder.valid_paths()}
    assert stamp_to_seconds(strips[0].header.stamp) in path_stamps
    overlay = feeder.overlays[-1][1]
    assert overlay.encoding == "rgb8" and (overlay.width, overlay.height) == (64, 48)
    front = decoded_rgb(feeder.payload[CAMERAS.index(DriveParams().overlay_camera)])
    drawn = np.frombuffer(overlay.data, np.uint8).reshape(48, 64, 3)
    assert not np.array_equal(drawn, front)

    assert node.set_parameters([Parameter("max_plan_age_s", value=2.5)])[0].successful
    assert node.outputs.params.max_plan_age_s == 2.5
    assert not node.set_parameters([Parameter("max_plan_age_s", value=-1.0)])[0].successful
    assert node.outputs.params.max_plan_age_s == 2.5

    feeder.drive(0.3, corrupt_camera=1,
                 until=lambda: any("corrupt_payload" in f for f in feeder.input_faults()),
                 what="corrupt JPEG named in diagnostics")

    nan_at = feeder.drive(1.0, nan_odometry_set=3,
                          until=lambda: any("non_finite" in f for f in feeder.input_faults()),
                          what="NaN odometry named in diagnostics")
    recovered_after = time.monotonic()
    feeder.drive(3.0, until=lambda: feeder.valid_paths(after=recovered_after),
                 what="recovery after NaN")
    t0s = [stamp_to_seconds(m.header.stamp) for _, m in feeder.valid_paths()]
    # a window at t0 >= nan_at + 0.07 needs odometry past nan_at (extrapolation limit 0.06 s),
    # so its 1.5 s ego history spans the NaN sample up to t0 = nan_at + 1.5
    assert not [t for t in t0s if nan_at + 0.07 <= t <= nan_at + 1.45], \
        f"planned from a window spanning the NaN odometry at {nan_at}: {sorted(set(t0s))}"

    assert node.set_parameters([Parameter("max_plan_age_s", value=1.0)])[0].successful
    silent_from = time.monotonic()
    feeder.drive(2.0, skip_camera=3,
                 until=lambda: any(f.startswith("silent") and "1 publisher(s) on" in f
                                   for f in feeder.input_faults()),
                 what="silent camera named in diagnostics")

    def stale_plan_withdrawn():
        with feeder.lock:
            return any(t > silent_from + 1.5 and not m.poses for t, m in feeder.paths)

    feeder.drive(skip_camera=3, until=stale_plan_withdrawn,
                 what="an empty Path once the plan went stale "
                      "(a stale plan was still published as valid)")
    assert node.set_parameters([Parameter("max_plan_age_s", value=3.0)])[0].successful
    resumed = time.monotonic()
    feeder.drive(2.5, until=lambda: feeder.valid_paths(after=resumed),
                 what="recovery after silent camera")

    def backwards_named_and_counted():
        statuses = feeder.planner_statuses()
        counted = statuses and int({kv.key: kv.value for kv in statuses[-1].values}.get(
            "rejected.time_backwards", 0)) >= 1
        return counted and any("time_backwards" in f for f in feeder.input_faults())

    backwards_from = time.monotonic()
    time_base_before = node.loop.time_base
    first_rewound = len(feeder.sets)
    feeder.drive(0.3, rewind_s=0.6)
    first_rewound_stamp = feeder.sets[first_rewound].stamp
    feeder.drive(2.5, until=backwards_named_and_counted,
                 what="stamps going backwards named in diagnostics and counted as rejections")

    def t0s_in_new_base():
        return [float(v["plan_t0"]) for t, v in
                ((t, values_of(s)) for t, s in feeder.timed_planner_statuses())
                if t >= backwards_from and "plan_t0" in v
                and int(v["plan_time_base"]) > time_base_before]

    feeder.drive(until=lambda: feeder.valid_paths(after=backwards_from + 0.5)
                 and t0s_in_new_base(),
                 what="recovery after stamps went backwards, reported on /diagnostics")
    new_base_t0s = t0s_in_new_base()
    history_from = first_rewound_stamp - 0.08 + HISTORY_SPAN_S
    assert new_base_t0s and min(new_base_t0s) >= history_from - 1e-6, \
        f"a plan after the jump back to {first_rewound_stamp} took input from before it"

    complete = np.array(sorted(s.stamp for s in feeder.sets if s.complete))
    t0s = sorted({stamp_to_seconds(m.header.stamp) for _, m in feeder.valid_paths()})
    assert all(np.abs(complete - t0).min() < 1e-6 for t0 in t0s), \
        "a Path is stamped with a time that no published camera set had"
    spoiled = [t0 for t0 in t0s if any(a <= t0 <= b for a, b in spoiled_t0_ranges(feeder.sets))]
    stand_ins = max((int(values_of(s).get("frame_stand_ins", 0))
                     for s in feeder.planner_statuses()), default=0)
    assert not spoiled or stand_ins > 0, \
        f"planned over a corrupt or missing frame without a stand-in counted: {spoiled}"

    assert feeder.transition(Transition.TRANSITION_DEACTIVATE)
    wait_for(lambda: not any(feeder.node_subscribed()),
             what="unsubscribe on deactivate", detail=feeder.camera_subscribers)
    count = len(feeder.paths)
    time.sleep(0.3)
    assert len(feeder.paths) == count

    assert feeder.transition(Transition.TRANSITION_ACTIVATE)
    wait_for(lambda: all(feeder.node_subscribed()) and all(
        p.get_subscription_count() >= 1 for p in feeder.images),
             what="subscriptions after re-activation", detail=feeder.camera_subscribers)
    reactivated = time.monotonic()
    feeder.drive(2.5, until=lambda: feeder.valid_paths(after=reactivated),
                 what="plans after re-activation")
    assert feeder.transition(Transition.TRANSITION_DEACTIVATE)
    assert feeder.transition(Transition.TRANSITION_CLEANUP)
    assert feeder.state() == State.PRIMARY_STATE_UNCONFIGURED
    assert node.engine is None


THREE_CAMERAS = [Parameter("camera_names", value=CAMERAS[:3]),
                 Parameter("camera_topics", value=[f"/c{i}" for i in range(3)]),
                 Parameter("camera_info_topics", value=[f"/c{i}/info" for i in range(3)])]


@pytest.mark.parametrize("changes", [
    [Parameter("camera_info_topics", value=["/only/one"])],
    [Parameter("sync_queue_size", value=1000)],
    [Parameter("control_rate_hz", value="fast")],
    [Parameter("model_dir", value="/nonexistent/model")],
    THREE_CAMERAS,
], ids=["topic_count", "range", "type", "model_dir", "model_camera_count"])
def test_invalid_parameters_fail_configure_without_crashing(graph, tiny_model_dir, changes):
    context = graph[0].context
    overrides = [Parameter("model_dir", value=str(tiny_model_dir)), Parameter("device",
                                                                             value="cpu")]
    changed = {p.name for p in changes}
    node = DriveNode(context=context, namespace="/bad", parameter_overrides=[
        *[p for p in overrides if p.name not in changed], *changes])
    try:
        assert node.trigger_configure() == TransitionCallbackReturn.FAILURE
        assert node.engine is None and node.outputs is None
    finally:
        node.destroy_node()


def test_model_without_drafter_fails_configure_with_speculative_on(graph, tmp_path):
    model_dir = make_tiny_model_dir(tmp_path / "model")
    (model_dir / "drafter.safetensors").unlink()
    node = DriveNode(context=graph[0].context, namespace="/nodrafter", parameter_overrides=[
        Parameter("model_dir", value=str(model_dir)), Parameter("device", value="cpu")])
    try:
        assert node.trigger_configure() == TransitionCallbackReturn.FAILURE
        node.set_parameters([Parameter("speculative", value=False)])
        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
        assert node.trigger_cleanup() == TransitionCallbackReturn.SUCCESS
    finally:
        node.release_all()
        node.destroy_node()


def test_raw_images_with_row_padding_are_planned(tiny_model_dir):
    context = local_context()
    topics = [f"/raw_test/{name}/image_raw" for name in CAMERAS]
    node = DriveNode(context=context, namespace="/raw_test", parameter_overrides=[
        Parameter("model_dir", value=str(tiny_model_dir)), Parameter("device", value="cpu"),
        Parameter("speculative", value=False), Parameter("image_transport", value="raw"),
        Parameter("image_reliability", value="reliable"), Parameter("camera_topics",
                                                                    value=topics),
        Parameter("odom_topic", value="/raw_test/odometry"), Parameter("max_plan_age_s",
                                                                        value=3.0)])
    client = Node("raw_feeder", context=context)
    spinning = SpinningApart(context, node, client)
    paths = []
    try:
        client.create_subscription(Path, "/raw_test/drive_node/trajectory",
                                   lambda m: paths.append(m) if m.poses else None, 10)
        faults = set()
        client.create_subscription(
            DiagnosticArray, names.DIAGNOSTICS_TOPIC,
            lambda a: faults.update(f"{s.name}: {s.message}" for s in a.status
                                    if s.message not in ("ok", "planning")), 10)
        images = [client.create_publisher(Image, t, 10) for t in topics]
        odom = client.create_publisher(Odometry, "/raw_test/odometry", 50)
        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
        assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
        wait_for(lambda: all(p.get_subscription_count() >= 1 for p in images)
                 and odom.get_subscription_count() >= 1, what="raw subscriptions")
        for topic in topics:
            qos = [i.qos_profile for i in client.get_subscriptions_info_by_topic(topic)]
            assert [q.reliability for q in qos] == [ReliabilityPolicy.RELIABLE]
        bgr = np.zeros((48, 64 * 3 + 8), np.uint8)
        bgr[:, : 64 * 3] = np.random.default_rng(1).integers(0, 256, (48, 64 * 3))
        grid = StampGrid(client.get_clock())
        deadline = time.monotonic() + WAIT_S
        while not paths and time.monotonic() < deadline:
            stamp = grid.next()
            for k in range(5):
                msg = Odometry()
                msg.header.stamp = seconds_to_stamp(stamp - 0.08 + 0.02 * k)
                msg.header.frame_id = "odom"
                msg.pose.pose.orientation.w = 1.0
                odom.publish(msg)
            for i, publisher in enumerate(images):
                publisher.publish(Image(header=Feeder._header(stamp, CAMERAS[i]), height=48,
                                        width=64, encoding="bgr8", step=64 * 3 + 8,
                                        data=bgr.tobytes()))
        assert paths, f"no valid path in {WAIT_S} s; diagnostics: {sorted(faults)}"
        assert len(paths[-1].poses) == 64
    finally:
        node.release_all()
        spinning.stop()
        node.destroy_node()
        client.destroy_node()
        context.shutdown()
