"""PlannerLoop with the real engine on a tiny model: plans, rejections, engine errors,
recovery, and the worker thread."""

import threading
import time

import numpy as np
import pytest
import torch
from helpers.planner_inputs import CAMERAS, IDENTITY, feed, images
from helpers.tiny_model import make_tiny_model_dir

from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.engine.engine import Engine
from flashdrive_ros.engine.window import WindowBuilder
from flashdrive_ros.ros import planner_loop
from flashdrive_ros.ros.planner_loop import IDLE_WAIT_S, ODOMETRY_INPUT, PlannerLoop


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    torch.set_num_threads(1)
    model_dir = make_tiny_model_dir(tmp_path_factory.mktemp("model"))
    return Engine.load(model_dir, EngineConfig(speculative=False))


def make_loop(engine):
    engine.reset()
    return PlannerLoop(engine, WindowBuilder(len(CAMERAS)), CAMERAS, overlay_index=1)


def test_plans_newest_window_once(engine):
    loop = make_loop(engine)
    feed(loop, 10.0, 11.0)
    assert not loop.run_once()
    planner, _ = loop.health()
    assert "odometry_short" in planner.last_rejection
    feed(loop, 11.02, 11.6)
    assert loop.run_once()
    record = loop.latest()
    assert record.plan.t0 == pytest.approx(11.6)
    assert record.plan.trajectories.shape == (1, 64, 3)
    assert record.overlay_image.shape == (48, 64, 3)
    assert not loop.run_once()
    planner, inputs = loop.health()
    assert planner.windows_planned == 1 and planner.engine_error == ""
    assert all(h.fault == "" for h in inputs)


def test_nan_odometry_blocks_windows_that_span_it_then_recovers(engine):
    loop = make_loop(engine)
    feed(loop, 20.0, 21.6)
    assert loop.run_once()
    feed(loop, 21.62, 22.0, nan_at=21.8)
    assert not loop.run_once()
    planner, inputs = loop.health()
    assert "nonfinite" in planner.last_rejection
    assert next(h for h in inputs if h.name == ODOMETRY_INPUT).faults_total == 1
    feed(loop, 22.02, 23.2)
    assert not loop.run_once()
    feed(loop, 23.22, 23.4)
    assert loop.run_once()
    assert loop.latest().plan.t0 == pytest.approx(23.4)


def test_stamps_going_backwards_reset_and_recover(engine):
    loop = make_loop(engine)
    feed(loop, 30.0, 31.6)
    assert loop.run_once()
    feed(loop, 29.0, 29.3)
    assert not loop.run_once()
    planner, _ = loop.health()
    assert planner.rejections_by_code["time_backwards"] == 1
    assert planner.last_rejection.startswith("odometry_short")
    assert loop.latest() is None
    feed(loop, 29.32, 30.6)
    assert loop.run_once()
    assert loop.latest().plan.t0 == pytest.approx(30.6)


def test_two_time_base_resets_before_an_attempt_are_both_counted(engine):
    loop = make_loop(engine)
    feed(loop, 40.0, 41.6)
    assert loop.run_once()
    feed(loop, 39.0, 39.1)
    feed(loop, 45.0, 46.6)
    assert loop.run_once()
    planner, _ = loop.health()
    assert planner.rejections_by_code == {"time_backwards": 1, "time_jump": 1}
    assert planner.windows_rejected == 2 and planner.last_rejection.startswith("time_jump")
    assert loop.latest().plan.t0 == pytest.approx(46.6)


def test_engine_error_is_reported_and_cleared(engine):
    loop = make_loop(engine)
    feed(loop, 40.0, 41.6, image_size=(16, 64))
    assert loop.run_once()
    planner, _ = loop.health()
    assert planner.engine_error.startswith("ValueError")
    assert loop.latest() is None
    feed(loop, 41.62, 43.2)
    assert loop.run_once()
    planner, _ = loop.health()
    assert planner.engine_error == "" and loop.latest().plan.t0 == pytest.approx(43.2)


def test_worker_thread_plans_and_stops(engine):
    engine.reset()
    setup_threads = []

    def setup():
        setup_threads.append(threading.get_ident())
        return {"cpu_threads": 1}

    loop = PlannerLoop(engine, WindowBuilder(len(CAMERAS)), CAMERAS, overlay_index=1,
                       worker_setup=setup)
    loop.start()
    try:
        feed(loop, 50.0, 51.6)
        deadline = time.monotonic() + 60
        while loop.latest() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert loop.latest() is not None
        assert setup_threads == [loop._thread.ident] != [threading.get_ident()]
        assert loop.health()[0].extra["cpu_threads"] == "1"
        with pytest.raises(RuntimeError, match="already started"):
            loop.start()
    finally:
        loop.stop()
    planned = loop.health()[0].windows_planned
    feed(loop, 51.62, 52.0)
    time.sleep(0.2)
    assert loop.health()[0].windows_planned == planned


def test_window_waits_for_the_odometry_at_its_t0_then_plans_without_spinning(engine):
    engine.reset()
    now = [100.0]
    loop = PlannerLoop(engine, WindowBuilder(len(CAMERAS)), CAMERAS, clock=lambda: now[0])
    feed(loop, 40.0, 41.58)
    loop.add_camera_set([41.6] * len(CAMERAS), images(416))
    assert not loop.run_once() and loop.health()[0].windows_rejected == 0
    assert 0 < loop._idle_wait() <= loop.late_tolerance_s + 1e-9
    loop.add_odometry(41.6, [4.0 * 41.6, 0.0, 0.0], IDENTITY, [4.0, 0.0, 0.0])
    assert loop._idle_wait() == 0.0
    assert loop.run_once() and loop.latest().plan.t0 == pytest.approx(41.6)
    for t in (41.62, 41.64, 41.66):
        loop.add_odometry(t, [4.0 * t, 0.0, 0.0], IDENTITY, [4.0, 0.0, 0.0])
        assert not loop.run_once()
        assert loop._idle_wait() == IDLE_WAIT_S
    loop.add_camera_set([41.7] * len(CAMERAS), images(417))
    assert not loop.run_once()
    now[0] += loop.late_tolerance_s + 1e-6
    assert loop._idle_wait() == 0.0
    assert loop.run_once() and loop.latest().plan.t0 == pytest.approx(41.7)


@pytest.mark.parametrize("stay_streaming", [True, False])
def test_stay_streaming_plans_the_window_a_frame_older_that_shares_a_frame(engine,
                                                                           stay_streaming):
    engine.reset()
    loop = PlannerLoop(engine, WindowBuilder(len(CAMERAS)), CAMERAS,
                       stay_streaming=stay_streaming)
    feed(loop, 60.0, 61.6)
    assert loop.run_once() and loop.latest().plan.full_prefill
    feed(loop, 61.62, 62.0)
    assert loop.run_once()
    plan = loop.latest().plan
    if stay_streaming:
        assert plan.t0 == pytest.approx(61.9) and not plan.full_prefill
    else:
        assert plan.t0 == pytest.approx(62.0) and plan.full_prefill
    feed(loop, 62.02, 62.6)
    assert loop.run_once()
    assert loop.latest().plan.t0 == pytest.approx(62.6) and loop.latest().plan.full_prefill


def feed_30hz(loop, t_start, t_end, speed=4.0):
    """Odometry every 0.02 s and camera sets every 1/30 s on [t_start, t_end]."""
    for k in range(int(round((t_end - t_start) * 150)) + 1):
        t = round(t_start + k / 150, 6)
        if k % 3 == 0:
            loop.add_odometry(t, [speed * t, 0.0, 0.0], IDENTITY, [speed, 0.0, 0.0])
        if k % 5 == 0:
            loop.add_camera_set([t] * len(CAMERAS), images(k, 48, 64))


def test_cameras_at_30_hz_are_planned_on_the_frame_grid_and_stream(engine):
    engine.reset()
    handed = []
    loop = PlannerLoop(engine, WindowBuilder(len(CAMERAS)), CAMERAS, stay_streaming=True,
                       on_camera_set=lambda stamps, images: handed.append(stamps[0]))
    feed_30hz(loop, 70.0, 71.6)
    assert loop.run_once() and loop.latest().plan.full_prefill
    first = loop.latest().plan.t0
    feed_30hz(loop, 71.6 + 1 / 30, 71.6 + 2 / 30)
    assert not loop.run_once()
    for end in (71.7, 71.9):
        feed_30hz(loop, loop.builder.latest_t0() + 1 / 30, end + 0.045)
        assert loop.run_once()
        plan = loop.latest().plan
        steps = (plan.t0 - first) / 0.1
        assert abs(steps - round(steps)) < 0.05 and not plan.full_prefill, plan.prefill_reason
    assert np.allclose(np.diff(handed), 0.1, atol=1e-6), np.diff(handed)


def test_camera_sets_are_handed_on_after_the_window_buffer(engine):
    handed = []
    loop = PlannerLoop(engine, WindowBuilder(len(CAMERAS)), CAMERAS,
                       on_camera_set=lambda stamps, images: handed.append(
                           (stamps, len(images), loop.builder.latest_t0())))
    feed(loop, 30.0, 30.2)
    assert [(s[0], n) for s, n, _ in handed] == [(30.0, 4), (30.1, 4), (30.2, 4)]
    assert [t0 for _, _, t0 in handed] == [30.0, 30.1, 30.2]


def test_silent_inputs_are_named(engine):
    now = [100.0]
    loop = PlannerLoop(engine, WindowBuilder(len(CAMERAS)), CAMERAS, clock=lambda: now[0])
    loop.note_silent(1.0)
    _, inputs = loop.health()
    assert all(h.fault == "silent: never received" for h in inputs)
    for name in [*CAMERAS, ODOMETRY_INPUT]:
        loop.note_received(name)
    now[0] = 100.5
    loop.note_received("front")
    now[0] = 101.2
    loop.note_silent(1.0, hint=lambda name: f"no publisher on /{name}")
    _, inputs = loop.health()
    faults = {h.name: h.fault for h in inputs}
    assert faults["front"] == ""
    assert faults["left"] == "silent: silent for 1.20 s; no publisher on /left"


class RecordingEngine:
    """The engine, recording which thread reasons and acts and every plan it acts out."""

    def __init__(self, engine):
        self.engine = engine
        self.plans = []
        self.threads = {"reason": set(), "act": set()}

    def reason(self, window, detach=False):
        self.threads["reason"].add(threading.get_ident())
        return self.engine.reason(window, detach)

    def act(self, reasoning):
        self.threads["act"].add(threading.get_ident())
        plan = self.engine.act(reasoning)
        self.plans.append(plan)
        return plan

    def step(self, window):
        return self.act(self.reason(window))

    def reset(self):
        self.engine.reset()

    def warmup(self):
        self.engine.warmup()


def test_actions_apart_give_the_plans_of_plain_steps(engine):
    engine.reset()
    recording = RecordingEngine(engine)
    loop = PlannerLoop(recording, WindowBuilder(len(CAMERAS)), CAMERAS, act_apart=True)
    loop.start()
    try:
        feed(loop, 60.0, 61.5)
        for k in range(1, 9):
            feed(loop, 61.5 + 0.02 * (5 * k - 4), 61.5 + 0.1 * k)
            deadline = time.monotonic() + 30
            while (not recording.plans or recording.plans[-1].t0 < 61.5 + 0.1 * k - 1e-6) \
                    and time.monotonic() < deadline:
                time.sleep(0.01)
    finally:
        loop.stop()
    assert loop._actor is None and len(recording.plans) >= 4
    reasoned, acted = recording.threads["reason"], recording.threads["act"]
    assert len(reasoned) == len(acted) == 1 and reasoned != acted
    assert threading.get_ident() not in reasoned | acted
    assert loop.health()[0].windows_planned == len(recording.plans)
    replay = make_loop(engine)
    fed_to = None
    for got in recording.plans:
        feed(replay, 60.0 if fed_to is None else round(fed_to + 0.02, 6), got.t0)
        fed_to = got.t0
        want = engine.step(replay.builder.build(got.t0))
        assert got.coc_token_ids == want.coc_token_ids
        assert got.full_prefill == want.full_prefill
        np.testing.assert_array_equal(got.trajectories, want.trajectories)
    assert not all(p.full_prefill for p in recording.plans)


def test_the_first_window_is_acted_on_the_actor_thread_however_slowly_it_is_set_up(
        engine, monkeypatch):
    """A window waiting when the loop starts goes to the actor even when building the actor
    takes longer than the worker's first reasoning."""

    class SlowActor(planner_loop.PlanActor):
        def __init__(self, *args, **kwargs):
            time.sleep(0.5)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(planner_loop, "PlanActor", SlowActor)
    engine.reset()
    recording = RecordingEngine(engine)
    loop = PlannerLoop(recording, WindowBuilder(len(CAMERAS)), CAMERAS, act_apart=True)
    feed(loop, 60.0, 61.5)
    loop.start()
    try:
        deadline = time.monotonic() + 30
        while not recording.plans and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        loop.stop()
    assert [p.t0 for p in recording.plans] == [pytest.approx(61.5)]
    reasoned, acted = recording.threads["reason"], recording.threads["act"]
    assert len(reasoned) == len(acted) == 1 and reasoned != acted


class GatedEngine(RecordingEngine):
    """Acts only once `gate` is set, so a window's action can be held in flight."""

    def __init__(self, engine):
        super().__init__(engine)
        self.gate = threading.Event()
        self.acting = threading.Event()
        self.reasoned_t0 = []

    def reason(self, window, detach=False):
        reasoning = super().reason(window, detach)
        self.reasoned_t0.append(window.t0)
        return reasoning

    def act(self, reasoning):
        self.acting.set()
        assert self.gate.wait(30)
        return super().act(reasoning)


def test_a_plan_acted_apart_across_a_time_jump_is_dropped(engine):
    engine.reset()
    gated = GatedEngine(engine)
    loop = PlannerLoop(gated, WindowBuilder(len(CAMERAS)), CAMERAS, act_apart=True)
    feed(loop, 70.0, 71.6)
    loop.start()
    try:
        assert gated.acting.wait(30)
        feed(loop, 80.0, 81.6)
        deadline = time.monotonic() + 30
        while "time_jump" not in loop.health()[0].rejections_by_code \
                and time.monotonic() < deadline:
            time.sleep(0.01)
        feed(loop, 81.62, 81.7)
        while max(gated.reasoned_t0) < 80 and time.monotonic() < deadline:
            time.sleep(0.01)
        gated.gate.set()
        while (loop.latest() is None or loop.latest().plan.t0 < 80) \
                and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        gated.gate.set()
        loop.stop()
    planner, _ = loop.health()
    assert gated.reasoned_t0[0] == pytest.approx(71.6) and gated.plans[0].t0 == pytest.approx(71.6)
    assert planner.plans_superseded == 1 and planner.windows_planned == len(gated.plans) - 1
    assert loop.latest().plan.t0 > 80 and loop.latest().time_base == 1
