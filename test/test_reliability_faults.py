"""Fault injection into a sim bag's message stream: each fault does what it names, seeded and
deterministic; offline (the node's input handling and PlannerLoop with the real engine on a
embedded model) no plan comes from a spoiled window, the fault is named, and planning recovers."""

import math

import numpy as np
import pytest
import torch

from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.engine.engine import Engine
from flashdrive_ros.paths import default_model_dir
from flashdrive_ros.reliability.fault_run import PlanMade, run_offline
from flashdrive_ros.reliability.fault_table import (
    WindowSpan,
    after_fault,
    fault_row,
    markdown_table,
)
from flashdrive_ros.reliability.faults import (
    Fault,
    FaultedStream,
    FaultSpecError,
    apply_fault,
    parse_faults,
)
from flashdrive_ros.ros.convert import ConversionError, image_msg_to_rgb
from flashdrive_ros.ros.harness.stream import NS_PER_S, looped, read_stream
from flashdrive_ros.ros.node import window_builder
from flashdrive_ros.ros.params import DriveParams
from flashdrive_ros.sim.bag import write_bag

PARAMS = DriveParams(num_samples=1, overlay_camera="")
CAMERAS = PARAMS.camera_topics
ODOMETRY = PARAMS.odom_topic
START_S, DURATION_S = 2.0, 1.0


@pytest.fixture(scope="module")
def messages(tmp_path_factory):
    bag = tmp_path_factory.mktemp("bag") / "bag"
    write_bag(bag, 5.0, seed=4, width=128, height=80, workers=1)
    return read_stream(bag, [*CAMERAS, ODOMETRY])


def faulted(messages, name, value=None, seed=0):
    fault = parse_faults(name if value is None else f"{name}={value}", START_S, DURATION_S)[0]
    return fault, apply_fault(messages, fault, seed, CAMERAS, ODOMETRY)


def inside(messages, message):
    begin = messages[0].clock_ns + START_S * NS_PER_S
    return begin <= message.clock_ns < begin + DURATION_S * NS_PER_S


def test_spec_parsing():
    assert [f.name for f in parse_faults("all")][:2] == ["drop", "jitter"]
    assert parse_faults("drop=0.2, odom_gap")[1] == Fault("odom_gap", 1.0)
    for bad in ("", "drop=2", "drop=x", "meteor", "jitter=-1", "odom_gap=nan"):
        with pytest.raises(FaultSpecError):
            parse_faults(bad)


def test_faults_are_deterministic_in_the_seed(messages):
    for name in ("drop", "jitter", "reorder", "corrupt_jpeg"):
        first, again, other = (faulted(messages, name, seed=s)[1] for s in (1, 1, 2))
        assert [m.raw for m in first.messages] == [m.raw for m in again.messages]
        assert [m.raw for m in first.messages] != [m.raw for m in other.messages]


def test_each_fault_does_what_it_names(messages):
    by_topic = lambda stream, topic: [m for m in stream.messages if m.topic == topic]  # noqa: E731
    images_inside = sum(m.topic in CAMERAS and inside(messages, m) for m in messages)
    _, drop = faulted(messages, "drop", 0.5)
    assert 0.3 * images_inside < drop.removed < 0.7 * images_inside
    _, jitter = faulted(messages, "jitter")
    shifts = [(b.stamp_ns - a.stamp_ns) / NS_PER_S for a, b in zip(messages, jitter.messages)]
    assert 0 < max(abs(s) for s in shifts) <= 0.03
    _, reorder = faulted(messages, "reorder", 0.5)
    stamps = [m.stamp_ns for m in by_topic(reorder, ODOMETRY)]
    assert any(b < a for a, b in zip(stamps, stamps[1:]))
    assert sorted(m.raw for m in reorder.messages) == sorted(m.raw for m in messages)
    _, duplicate = faulted(messages, "duplicate", 0.5)
    assert len(duplicate.messages) > len(messages)
    _, silent = faulted(messages, "silent_camera")
    assert not [m for m in by_topic(silent, CAMERAS[1]) if inside(messages, m)
                and m.clock_ns < messages[0].clock_ns + (START_S + 2.0) * NS_PER_S]
    assert len(by_topic(silent, CAMERAS[0])) == len(by_topic(FaultedStream(messages),
                                                             CAMERAS[0]))
    _, gap = faulted(messages, "odom_gap")
    odometry = [m.stamp_ns / NS_PER_S for m in by_topic(gap, ODOMETRY)]
    assert max(np.diff(odometry)) == pytest.approx(1.02, abs=0.005)
    _, jump = faulted(messages, "time_jump", 2.0)
    clock = np.array([m.clock_ns for m in jump.messages]) / NS_PER_S
    assert np.diff(clock).min() == pytest.approx(-2.0, abs=0.03)
    assert jump.fault_end_stamp == pytest.approx(jump.fault_start_stamp - 2.0)


def test_spoiling_faults_make_unusable_messages(messages):
    _, corrupt = faulted(messages, "corrupt_jpeg", 0.5)
    assert corrupt.spoiled
    spoiled = {(t, round(s, 6)) for t, s in corrupt.spoiled}
    for m in corrupt.messages:
        if (m.topic, round(m.stamp_ns / NS_PER_S, 6)) in spoiled:
            with pytest.raises(ConversionError):
                image_msg_to_rgb(m.message())
    _, resized = faulted(messages, "wrong_size", 0.5)
    shapes = {image_msg_to_rgb(m.message()).shape for m in resized.messages
              if m.topic in CAMERAS}
    assert shapes == {(80, 128, 3), (40, 64, 3)}
    _, nonfinite = faulted(messages, "nonfinite_odom", 0.5)
    xs = [m.message().pose.pose.position.x for m in nonfinite.messages if m.topic == ODOMETRY]
    assert any(math.isnan(x) for x in xs) and any(math.isinf(x) for x in xs)


def plans_made(*t0_and_time_base):
    return [PlanMade(t0, False, "", base) for t0, base in t0_and_time_base]


def test_plans_after_a_fault_are_those_of_windows_past_it():
    gap = FaultedStream([], fault_start_stamp=102.0, fault_end_stamp=103.0)
    made = plans_made((101.5, 0), (102.5, 0), (103.0, 0), (103.1, 0))
    assert after_fault(made, Fault("odom_gap", 1.0), gap) == [103.0, 103.1]
    loop = FaultedStream([], fault_start_stamp=102.5, fault_end_stamp=97.5)
    jump = Fault("time_jump", 5.0)
    made = plans_made((101.5, 0), (102.4, 0), (99.1, 1), (101.6, 1))
    assert after_fault(made, jump, loop) == [99.1, 101.6]
    assert after_fault(made[:2], jump, loop) == []


def test_looped_stream_runs_forward(messages):
    stream = looped(messages[:50], NS_PER_S // 10)
    taken = [next(stream) for _ in range(150)]
    clock = np.array([m.clock_ns for m in taken])
    assert (np.diff(clock) >= 0).all()
    assert taken[100].stamp_ns - taken[0].stamp_ns == 2 * (
        messages[49].clock_ns - messages[0].clock_ns + NS_PER_S // 10)


@pytest.fixture(scope="module")
def engine():
    torch.set_num_threads(2)
    return Engine.load(default_model_dir(), EngineConfig(num_samples=1, device="cpu"))


@pytest.fixture(scope="module")
def clean(messages, engine):
    return run_offline(FaultedStream(messages), engine,
                       window_builder(engine.model.cfg, len(CAMERAS)), PARAMS)


@pytest.mark.parametrize("name, value, names", [
    ("nonfinite_odom", 0.3, {"non_finite", "nonfinite"}),
    ("corrupt_jpeg", 0.3, {"corrupt_payload"}),
    ("time_jump", 2.0, {"time_backwards"}),
])
def test_offline_no_plan_from_a_spoiled_window_and_recovery(messages, engine, clean, name,
                                                            value, names):
    fault, stream = faulted(messages, name, value)
    # no stand-ins: a window over a refused frame is refused, so every plan whose window
    # spans a spoiled stamp would have drawn on it
    builder = window_builder(engine.model.cfg, len(CAMERAS), frame_stand_in_s=0.0)
    run = run_offline(stream, engine, builder, PARAMS)
    row = fault_row(fault, "offline", run, clean, stream, WindowSpan(0.3, 0.04, 1.5), ODOMETRY)
    print(markdown_table([row]))
    assert clean.plans_made > 5 and clean.plans_rejected == 0
    assert set(clean.rejections) <= {"too_few_frames", "odometry_short"}
    assert row["plans_from_spoiled_windows"] == 0
    assert names & run.named and row["fault_named"]
    assert row["recovered"] and row["stayed_up"]
    assert run.plans_made < clean.plans_made
    if name == "time_jump":
        assert run.full_prefills.get("time base reset", 0) >= 1
