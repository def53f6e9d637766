"""drive_node in a process of its own, driven over DDS through configure / activate /
deactivate / cleanup again and again with a drive flowing in while it is active: every
activation plans, after each cleanup the process has the same threads, and from the third
cleanup on its resident memory does not trend upwards (the first cycles also hold torch's
one-time initialisation; an engine kept alive per cycle adds about 9 MB a cycle, while the
samples of a sound node wander by +-5 MB about a flat line, now and then one by +20 MB, so the
trend is the median of the pairwise slopes)."""

import os
import threading
import time

import numpy as np
import pytest
from helpers.tiny_model import make_tiny_model_dir
from lifecycle_msgs.msg import Transition

from flashdrive_ros.ros.harness.lifecycle_client import LifecycleClient
from flashdrive_ros.ros.harness.loopback import loopback_domain_id
from flashdrive_ros.ros.harness.node_observer import NodeObserver
from flashdrive_ros.ros.harness.node_process import NodeProcess, read_process
from flashdrive_ros.ros.harness.stream import NS_PER_S, looped, read_stream
from flashdrive_ros.ros.harness.stream_player import StreamPlayer
from flashdrive_ros.ros.params import DriveParams
from flashdrive_ros.sim.bag import write_bag

pytestmark = [pytest.mark.ros, pytest.mark.timeout(600)]

PARAMS = DriveParams()
TOPICS = {**{t: "sensor_msgs/msg/CompressedImage" for t in PARAMS.camera_topics},
          PARAMS.odom_topic: "nav_msgs/msg/Odometry"}
CYCLES = 12
TRANSITION_TIMEOUT_S = 120.0
PLAN_TIMEOUT_S = 90.0
SETTLE_S = 1.0
RSS_SLOPE_LIMIT_MB = 4.0  # median pairwise growth per cycle of the samples from the third on


@pytest.fixture(scope="module")
def drive(tmp_path_factory):
    bag = tmp_path_factory.mktemp("bag") / "bag"
    write_bag(bag, 6.0, seed=7, width=64, height=48, workers=1)
    return looped(read_stream(bag, list(TOPICS)), NS_PER_S // 10)


def wait_for(predicate, timeout_s, what, process):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert process.alive(), f"the node exited waiting for {what}:\n{process.log_tail()}"
        assert time.monotonic() < deadline, f"no {what} in {timeout_s} s:\n{process.log_tail()}"
        time.sleep(0.05)


def planned_since(observer, since):
    return any(t.received_at >= since and t.poses and not t.stop
               for t in observer.snapshot().trajectories)


def test_repeated_lifecycle_cycles_leak_no_threads_or_memory(drive, client_node, tmp_path):
    name = f"drive_node_cycles_{os.getpid()}"
    parameters = {"model_dir": str(make_tiny_model_dir(tmp_path / "model")), "device": "cpu",
                  "cpu_threads": 2, "image_reliability": "reliable", "overlay_camera": "",
                  "max_plan_age_s": 5.0, "act_apart": True}
    player = StreamPlayer(client_node, TOPICS)
    observer = NodeObserver(client_node, name)
    samples = []
    with NodeProcess(name, parameters, loopback_domain_id(), tmp_path, autostart=False) as process:
        lifecycle = LifecycleClient(client_node, f"/{name}", alive=process.alive)
        assert lifecycle.state(TRANSITION_TIMEOUT_S) == "unconfigured"
        for _ in range(CYCLES):
            lifecycle.transition(Transition.TRANSITION_CONFIGURE, TRANSITION_TIMEOUT_S)
            lifecycle.transition(Transition.TRANSITION_ACTIVATE, TRANSITION_TIMEOUT_S)
            assert player.wait_for_subscribers(list(TOPICS), 30.0) == []
            active_from = time.monotonic()
            stop = threading.Event()
            playing = threading.Thread(target=player.play, args=(drive, stop), daemon=True)
            playing.start()
            try:
                wait_for(lambda: planned_since(observer, active_from), PLAN_TIMEOUT_S,
                         "plan in this activation", process)
                wait_for(lambda: {k: observer.snapshot().planner.get(k)
                                  for k in ("cpu_threads", "act_apart")}
                         == {"cpu_threads": "2", "act_apart": "True"}, PLAN_TIMEOUT_S,
                         "the planner's cpu_threads 2 and act_apart on /diagnostics", process)
            finally:
                stop.set()
                playing.join(timeout=10.0)
            lifecycle.transition(Transition.TRANSITION_DEACTIVATE, TRANSITION_TIMEOUT_S)
            lifecycle.transition(Transition.TRANSITION_CLEANUP, TRANSITION_TIMEOUT_S)
            assert lifecycle.state() == "unconfigured"
            time.sleep(SETTLE_S)
            samples.append(read_process(process.pid))
    print([(round(s.rss_mb, 1), s.threads) for s in samples])
    assert all(s.threads == samples[0].threads for s in samples), samples
    rss = np.array([s.rss_mb for s in samples[2:]])  # rss: [CYCLES - 2] MB
    later, earlier = np.triu_indices(len(rss), k=1)[::-1]
    slope = np.median((rss[later] - rss[earlier]) / (later - earlier))
    assert slope < RSS_SLOPE_LIMIT_MB, (slope, samples)
