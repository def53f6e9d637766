"""Camera messages taken serialized (raw subscriptions) and gated by their stamp, over real DDS
on loopback: the same reduced pixels as rclpy's deserialized messages, frames off the frame
grid dropped before they are decoded, truncated CDR named on /diagnostics."""

import threading
import time

import cv2
import numpy as np
import pytest
import torch
from diagnostic_msgs.msg import DiagnosticArray
from helpers.spinning import SpinningApart
from helpers.tiny_model import make_tiny_model_dir
from nav_msgs.msg import Odometry, Path
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.serialization import serialize_message
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import Header

from flashdrive_ros.engine.window import WindowBuilder
from flashdrive_ros.ros import names
from flashdrive_ros.ros.convert import seconds_to_stamp, stamp_to_seconds
from flashdrive_ros.ros.harness.loopback import local_context
from flashdrive_ros.ros.camera_worker import BEHIND_EXTRA
from flashdrive_ros.ros.input_handler import GATE_EXTRA, GATE_OPENINGS_EXTRA, OFF_GRID_EXTRA
from flashdrive_ros.ros.inputs import InputSubscriptions
from flashdrive_ros.ros.node import DriveNode
from flashdrive_ros.ros.params import DriveParams
from flashdrive_ros.ros.planner_loop import PlannerLoop

pytestmark = [pytest.mark.ros, pytest.mark.timeout(240)]

CAMERAS = DriveParams().camera_names
WAIT_S = 30.0
MODEL_SIZE = (20, 32)
RNG = np.random.default_rng(3)
TAIL_FRAMES = 240  # camera frames the node received (all cameras) while its gate was on
RESYNC_S = 1.5  # no plan this long: every frame whole again until a plan shows the node's grid


def wait_for(predicate, what, timeout=WAIT_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def pixels(height, width, channels):
    noise = RNG.integers(0, 256, (height, width, channels), dtype=np.uint8)
    return cv2.GaussianBlur(noise, (5, 5), 2).reshape(height, width, channels)


def raw_message(stamp, frame_id, encoding, height, width, pad):
    channels = {"rgb8": 3, "bgr8": 3, "mono8": 1, "rgba8": 4}[encoding]
    rows = np.zeros((height, width * channels + pad), np.uint8)
    rows[:, :width * channels] = pixels(height, width, channels).reshape(height, -1)
    return Image(header=Header(stamp=seconds_to_stamp(stamp), frame_id=frame_id),
                 height=height, width=width, encoding=encoding, step=width * channels + pad,
                 data=rows.tobytes())


def compressed_message(stamp, frame_id, kind, height, width):
    ok, data = cv2.imencode("." + kind, pixels(height, width, 3))
    assert ok
    return CompressedImage(header=Header(stamp=seconds_to_stamp(stamp), frame_id=frame_id),
                           format=kind, data=data.tobytes())


class NoEngine:
    def reset(self):
        pass


def subscriptions(node, topics, transport, serialized):
    """InputSubscriptions of a node feeding a PlannerLoop that is never started; returns them
    and the camera sets they hand on, as (stamps, images). The serialized path runs on the
    camera thread, the deserialized one on the executor thread (the plain path of both)."""
    params = DriveParams(camera_topics=topics, image_transport=transport,
                         image_reliability="reliable", serialized_images=serialized,
                         camera_thread=serialized, frame_gate=False, overlay_camera="",
                         odom_topic=f"{topics[0]}/odometry")
    sets = []
    loop = PlannerLoop(NoEngine(), WindowBuilder(len(CAMERAS)), CAMERAS,
                       on_camera_set=lambda stamps, images: sets.append((stamps, images)))
    return InputSubscriptions(node, params, loop, lambda _: None, MODEL_SIZE), sets


@pytest.mark.parametrize("transport", ["raw", "compressed"])
def test_serialized_and_deserialized_subscriptions_give_the_same_pixels(transport,
                                                                          client_node):
    node = client_node
    topics = [f"/pixels_{transport}/{name}/image" for name in CAMERAS]
    message_type = Image if transport == "raw" else CompressedImage
    serialized, serialized_sets = subscriptions(node, topics, transport, True)
    deserialized, deserialized_sets = subscriptions(node, topics, transport, False)
    try:
        assert [s.raw for s in serialized.subscriptions[:4]] == [True] * 4
        assert [s.raw for s in deserialized.subscriptions[:4]] == [False] * 4
        assert serialized.worker is not None and deserialized.worker is None
        publishers = [node.create_publisher(message_type, t, 10) for t in topics]
        wait_for(lambda: all(p.get_subscription_count() == 2 for p in publishers),
                 "both subscriptions of every camera")
        kinds = (["rgb8", "bgr8", "mono8", "rgba8"] if transport == "raw"
                 else ["jpeg", "png", "jpeg", "png"])
        sizes = [(1080 // 8, 1920 // 8), (720 // 8, 1280 // 8), (90, 160), (135, 240)]
        for k in range(3):
            stamp = 100.0 + 0.1 * k
            for i, publisher in enumerate(publishers):
                if transport == "raw":
                    publisher.publish(raw_message(stamp, CAMERAS[i], kinds[i], *sizes[i],
                                                  pad=4 * (i % 2)))
                else:
                    publisher.publish(compressed_message(stamp, CAMERAS[i], kinds[i],
                                                         *sizes[i]))
            wait_for(lambda n=k + 1: len(serialized_sets) == len(deserialized_sets) == n,
                     "one camera set at a time (the camera thread keeps two per camera)")
        wait_for(lambda: len(serialized_sets) == len(deserialized_sets) == 3,
                 "three camera sets on both paths")
        for (stamps, images), (stamps_d, images_d) in zip(serialized_sets, deserialized_sets):
            assert stamps == stamps_d
            for image, image_d in zip(images, images_d):
                assert image.shape == (*MODEL_SIZE, 3)
                np.testing.assert_array_equal(image, image_d)
    finally:
        serialized.destroy()
        deserialized.destroy()


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    torch.set_num_threads(1)
    return make_tiny_model_dir(tmp_path_factory.mktemp("model"))


def planner_and_inputs(array):
    """(planner values, camera name -> input values) of one DiagnosticArray; planner values
    are None when it carries no planner status."""
    planner, inputs = None, {}
    for status in array.status:
        values = {kv.key: kv.value for kv in status.values}
        if status.name.endswith(": planner"):
            planner = values
        for name in CAMERAS:
            if status.name.endswith(f": input {name}"):
                inputs[name] = values
    return planner, inputs


class NodeReports:
    """The node's /diagnostics, each array read once as it arrives: (planner values, camera
    name -> input values) per array with a planner status, and every last_fault per camera."""

    def __init__(self):
        self.records = []
        self.faults_seen = {name: set() for name in CAMERAS}
        self.lock = threading.Lock()

    def add(self, array):
        planner, inputs = planner_and_inputs(array)
        if planner is None:
            return
        with self.lock:
            self.records.append((planner, inputs))
            for name, values in inputs.items():
                self.faults_seen[name].add(values.get("last_fault", ""))

    def latest(self):
        with self.lock:
            return self.records[-1][0] if self.records else {}

    def named(self, camera, *words):
        with self.lock:
            return any(all(w in f for w in words) for f in self.faults_seen[camera])

    def gate_on_tail(self):
        """The trailing run of records whose planner says the frame gate is on and has
        neither opened nor restarted its grid (a time jump) since the first of them, oldest
        first."""
        with self.lock:
            records = list(self.records)
        tail = []
        for planner, inputs in reversed(records):
            if planner.get(GATE_EXTRA) != "on" or tail and gate_epoch(planner) != gate_epoch(
                    tail[0][0]):
                break
            tail.insert(0, (planner, inputs))
        return tail


def gate_epoch(planner):
    """What changes when the frame gate opens or restarts its grid after a time jump."""
    return tuple(planner.get(key, "0") for key in (GATE_OPENINGS_EXTRA, "rejected.time_jump",
                                                   "full_prefill.time_base_reset"))


def test_cameras_at_30_hz_are_gated_before_decoding_and_truncated_cdr_is_named(
        tiny_model_dir):
    """Every frame off the 0.1 s grid carries truncated CDR: decoded, each would be a
    truncated_message fault. The node plans, counts them as dropped off the grid, and names
    a frame on the grid cut inside its pixel data and an extra frame cut inside its header
    (no stamp to gate it on). Every frame is whole until the first plan, whose t0 shows
    the grid the node's gate took. A loaded machine can stall this process long enough for
    the node to lose frames, and the gate then rightly decodes every frame for a while, so
    the node's counts are compared over its last TAIL_FRAMES or more frames received with the
    gate on throughout; a stall past max_time_jump makes the gate take a new grid, which the
    feeder learns again from a plan on whole frames (RESYNC_S)."""
    context = local_context()
    topics = [f"/gate_test/{name}/image_raw" for name in CAMERAS]
    node = DriveNode(context=context, namespace="/gate_test", parameter_overrides=[
        Parameter("model_dir", value=str(tiny_model_dir)), Parameter("device", value="cpu"),
        Parameter("speculative", value=False), Parameter("image_transport", value="raw"),
        Parameter("image_reliability", value="reliable"),
        Parameter("camera_topics", value=topics), Parameter("overlay_camera", value=""),
        Parameter("odom_topic", value="/gate_test/odometry"),
        Parameter("max_plan_age_s", value=3.0)])
    client = Node("gate_feeder", context=context)
    spinning = SpinningApart(context, node, client)
    paths, reports = [], NodeReports()
    try:
        client.create_subscription(Path, "/gate_test/drive_node/trajectory",
                                   lambda m: paths.append(m) if m.poses else None, 10)
        client.create_subscription(DiagnosticArray, names.DIAGNOSTICS_TOPIC,
                                   reports.add, 10)
        images = [client.create_publisher(Image, t, 30) for t in topics]
        odom = client.create_publisher(Odometry, "/gate_test/odometry", 50)
        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
        assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
        wait_for(lambda: all(p.get_subscription_count() >= 1 for p in images)
                 and odom.get_subscription_count() >= 1, "the node's subscriptions")
        valid = [serialize_message(raw_message(0.0, CAMERAS[i], "bgr8", 48, 64, pad=0))
                 for i in range(len(CAMERAS))]
        clock = client.get_clock()
        start = round(clock.now().nanoseconds * 1e-9, 1) + 0.1
        truncate = {}

        def frame(i, stamp, whole):
            """The CDR of camera i's frame at `stamp`: the valid one with its stamp patched
            in, or cut inside its pixel data."""
            buffer = bytearray(valid[i])
            buffer[4:12] = serialize_message(Header(stamp=seconds_to_stamp(stamp)))[4:12]
            return bytes(buffer) if whole else bytes(buffer[:len(buffer) - 100])

        def node_grid(k):
            """Whether frame time k is on the node's frame grid, which its gate took from the
            first frame of camera 0 to arrive (again after a gap of max_time_jump): the first
            plan's t0 since every frame was whole lies on it."""
            return (k - grid_frame) % 3 == 0

        def received(inputs, names=CAMERAS):
            return sum(int(inputs.get(name, {}).get("received", 0)) for name in names)

        def clean_tail():
            tail = reports.gate_on_tail()
            frames = received(tail[-1][1]) - received(tail[0][1]) if tail else 0
            return tail if frames >= TAIL_FRAMES else None

        def named():
            """Whether /diagnostics named camera 2's frame cut inside its pixel data and camera
            1's cut inside its header."""
            return (reports.named(CAMERAS[2], "truncated_message", "inside data")
                    and reports.named(CAMERAS[1], "truncated_message", "inside header"))

        def setbacks():
            """What keeps a truncated frame from being named: the gate opened (frames decoded
            off the grid name their own truncation), the node's own camera queue dropped
            messages, or the feeder lost the node's grid."""
            latest = reports.latest()
            return (latest.get(GATE_OPENINGS_EXTRA, "0"), latest.get(BEHIND_EXTRA, "0"),
                    resyncs)

        k, rounds, resyncs, whole_since = 0, 0, 0, 0
        whole_until = grid_frame = tail = truncated_at = None
        plans_seen, last_plan_at = 0, time.monotonic()
        deadline = time.monotonic() + 3 * WAIT_S
        while time.monotonic() < deadline:
            stamp = round(start + k / 30, 6)
            while clock.now().nanoseconds * 1e-9 < stamp:
                time.sleep(0.002)
            msg = Odometry()
            msg.header.stamp = seconds_to_stamp(stamp)
            msg.header.frame_id = "odom"
            msg.pose.pose.orientation.w = 1.0
            odom.publish(msg)
            if len(paths) != plans_seen:
                plans_seen, last_plan_at = len(paths), time.monotonic()
            if whole_until is None and len(paths) > whole_since:
                whole_until = k
                grid_frame = round((stamp_to_seconds(paths[-1].header.stamp) - start) * 30)
            elif whole_until is not None and time.monotonic() - last_plan_at > RESYNC_S:
                whole_until, whole_since, resyncs = None, len(paths), resyncs + 1
            on_grid = whole_until is None or node_grid(k)
            for i, publisher in enumerate(images):
                if i == 2 and truncate.get(i) == k:
                    publisher.publish(frame(i, stamp, False))
                    continue
                if truncate.get(i) == k:
                    publisher.publish(frame(i, stamp, True)[:10])
                publisher.publish(frame(i, stamp, on_grid))
            k += 1
            if k % 10 or len(paths) < 3 or whole_until is None:
                continue
            settled = truncate and k > max(truncate.values()) + 30
            gate_on = reports.latest().get(GATE_EXTRA) == "on"
            if gate_on and (not truncate or (settled and not named()
                                             and setbacks() != truncated_at)):
                next_on_grid = next(j for j in range(k, k + 3) if node_grid(j))
                truncate = {2: next_on_grid + 3, 1: next_on_grid + 6}
                truncated_at, paths_before, rounds = setbacks(), len(paths), rounds + 1
            elif settled and len(paths) > paths_before and named():
                tail = clean_tail()
                if tail:
                    break
        values = reports.latest()
        assert len(paths) >= 3, f"no plans; planner: {values}"
        assert truncate, f"the frame gate was never on; planner: {values}"
        assert len(paths) > paths_before, "no plan after the truncated frames"
        assert named(), (f"the truncated frames were not named ({rounds} rounds, each again "
                         f"after the gate opened, the node dropped camera messages or the "
                         f"feeder learned the grid again ({resyncs} times)); planner: {values}")
        assert tail, (f"the frame gate was not on for {TAIL_FRAMES} frames in a row in "
                      f"{3 * WAIT_S} s; last: {values.get(GATE_EXTRA)}")
        (first, first_inputs), (last, last_inputs) = tail[0], tail[-1]
        off_grid = 2 / 3 * (received(last_inputs) - received(first_inputs))
        dropped = int(last.get(OFF_GRID_EXTRA, 0)) - int(first.get(OFF_GRID_EXTRA, 0))
        assert dropped >= 0.8 * off_grid - 8, (dropped, off_grid)
        faults = {name: int(last_inputs.get(name, {}).get("faults_total", 0))
                  - int(first_inputs.get(name, {}).get("faults_total", 0)) for name in CAMERAS}
        outer = CAMERAS[::3]
        off_grid_outer = 2 / 3 * (received(last_inputs, outer) - received(first_inputs, outer))
        assert sum(faults[name] for name in outer) <= 0.1 * off_grid_outer, (faults, outer)
    finally:
        node.release_all()
        spinning.stop()
        node.destroy_node()
        client.destroy_node()
        context.shutdown()
