"""Closed-loop drives: the externally driven world against the open-loop simulation, the
metrics read from the world (a planner that ignores parked cars hits one, one that ignores
the light runs it, one that ignores the road leaves it; the expert's own plan does none of
it), and the runner with the real engine on the tiny model through the CLI."""

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from helpers.tiny_model import make_tiny_model_dir

from flashdrive_ros.closed_loop.cli import main
from flashdrive_ros.closed_loop.collision_context import collision_context
from flashdrive_ros.closed_loop.controller import TrackingConfig, TrajectoryTracker, WorldPlan
from flashdrive_ros.closed_loop.expert_planner import ExpertPlanner
from flashdrive_ros.sim.rectangles import overlap, rectangle
from flashdrive_ros.sim.scenarios import build_world
from flashdrive_ros.closed_loop.bend_approach import BANDS
from flashdrive_ros.closed_loop.plan_trace import FIELDS, plan_trace
from flashdrive_ros.closed_loop.report import markdown
from flashdrive_ros.closed_loop.runner import ClosedLoopDrive, DriveSettings
from flashdrive_ros.engine.types import Plan
from flashdrive_ros.model.config import tiny
from flashdrive_ros.sim.drive import FUTURE_DT, simulate, to_frame
from flashdrive_ros.sim.ego_world import EgoWorld
from flashdrive_ros.sim.vehicle import EgoState, step_bicycle
from flashdrive_ros.sim.world import EGO_LANE_D

SEED = 1_000_003
MODEL = tiny()
WAYPOINTS = 40
EXPERT_WAYPOINTS = 20


def test_the_expert_driving_the_ego_world_is_the_open_loop_drive():
    log = simulate(SEED, 2.0)
    sim = EgoWorld(SEED, 2.0)
    rows = []
    for _ in range(len(log.ego)):
        rows.append((sim.t, sim.ego.x, sim.ego.y, sim.ego.yaw, sim.ego.v))
        accel, steer, _ = sim.expert_control()
        sim.step(accel, steer)
    assert np.array_equal(np.asarray(rows), log.ego[:, :5])


def test_rectangles_overlap_only_when_they_touch():
    a = rectangle(0.0, 0.0, 0.3, 4.8, 1.9)
    assert overlap(a, rectangle(2.0, 1.0, 1.2, 4.0, 1.8))
    assert not overlap(a, rectangle(0.0, 3.0, 0.3, 4.8, 1.9))
    assert not overlap(a, rectangle(5.5, 0.0, np.pi / 2, 0.5, 0.5))


def test_the_tracker_follows_the_plan_and_brakes_without_one():
    tracker = TrajectoryTracker()
    ego = EgoState(0.0, 0.5, 0.0, 8.0)
    ahead = np.stack([8.0 * FUTURE_DT * np.arange(1, 41), np.zeros(40)], axis=1)
    plan = WorldPlan.from_ego_frame(0.0, FUTURE_DT, ahead, EgoState(0.0, 0.0, 0.0, 8.0), 0.0)
    accel, steer = tracker.command(ego, 0.1, plan)
    assert abs(accel) < 0.5 and steer < -0.005
    assert tracker.command(ego, 0.1 + tracker.cfg.max_plan_age_s, plan)[0] < -1.0
    assert tracker.command(ego, 0.1, None)[0] == -tracker.cfg.fallback_decel


def _stop_and_go_plan(v0: float, decel: float, wait_s: float, dt: float = FUTURE_DT
                      ) -> np.ndarray:
    """[N, 2] straight-ahead waypoints: brake at `decel` to a stop, wait, pull away."""
    t = dt * np.arange(1, 81)
    t_stop = v0 / decel
    braking = v0 * np.minimum(t, t_stop) - 0.5 * decel * np.minimum(t, t_stop) ** 2
    going = np.clip(t - t_stop - wait_s, 0.0, None)
    return np.stack([braking + 0.5 * decel * going ** 2, np.zeros_like(t)], axis=1)


def _track(tracker: TrajectoryTracker, plan: WorldPlan, v0: float, seconds: float
           ) -> np.ndarray:
    """[N, 3] (t, x, v) of an ego at v0 tracking `plan` at 50 Hz."""
    ego, rows = EgoState(0.0, 0.0, 0.0, v0), []
    for i in range(int(seconds * 50)):
        t = i / 50
        rows.append((t, ego.x, ego.v))
        accel, steer = tracker.command(ego, t, plan)
        ego = step_bicycle(ego, accel, steer, 1 / 50)
    return np.asarray(rows)


def test_the_tracker_stops_where_the_plan_stops_and_follows_its_braking_closely():
    v0, decel = 10.0, 2.0
    ahead = _stop_and_go_plan(v0, decel, wait_s=1.0)
    plan = WorldPlan.from_ego_frame(0.0, FUTURE_DT, ahead, EgoState(0.0, 0.0, 0.0, v0), 0.0)
    stop_x = v0 ** 2 / (2 * decel)
    rows = _track(TrajectoryTracker(TrackingConfig(max_plan_age_s=10.0)), plan, v0, 7.0)
    stopped = rows[rows[:, 2] < 0.05]
    assert stopped.size and stop_x - 1.5 < stopped[0, 1] <= stop_x + 0.2
    assert rows[rows[:, 0] <= v0 / decel + 0.9][-1, 1] <= stop_x + 0.2
    assert rows[-1, 1] > stop_x + 0.5
    creep = np.stack([np.cumsum(0.5 + 0.3 * np.sin(np.arange(64))) * FUTURE_DT,
                      np.zeros(64)], axis=1)  # 0.2-0.8 m/s: creeps on, never stops
    creeping = WorldPlan.from_ego_frame(0.0, FUTURE_DT, creep, EgoState(0.0, 0.0, 0.0, 0.0),
                                        0.0)
    patient = TrajectoryTracker(TrackingConfig(max_plan_age_s=10.0))
    assert _track(patient, creeping, 0.0, 2.0)[-1, 1] > 0.5
    t = FUTURE_DT * np.arange(1, 81)
    slowing = np.stack([v0 * t - 0.5 * decel * np.minimum(t, 2.5) ** 2
                        - decel * 2.5 * np.clip(t - 2.5, 0, None), np.zeros_like(t)], axis=1)
    plan = WorldPlan.from_ego_frame(0.0, FUTURE_DT, slowing, EgoState(0.0, 0.0, 0.0, v0), 0.0)
    lag = {}
    for feedforward in (0.0, 1.0):
        tracker = TrajectoryTracker(TrackingConfig(accel_feedforward=feedforward,
                                                   max_plan_age_s=10.0))
        r = _track(tracker, plan, v0, 2.5)
        lag[feedforward] = float(np.mean(r[:, 2] - (v0 - decel * r[:, 0])))
    assert abs(lag[1.0]) < 0.5 * abs(lag[0.0])


class RoutePlanner:
    """Plans `speed` m/s along the ego lane's centre `offset` m to its left (or straight
    ahead), blind to everything else."""

    def __init__(self, sim: EgoWorld, speed: float, straight: bool = False,
                 offset: float = 0.0) -> None:
        self.sim, self.speed, self.straight, self.offset = sim, speed, straight, offset

    def reset(self) -> None:
        return None

    def step(self, window) -> Plan:
        ego, route = self.sim.ego, self.sim.world.route
        ahead = self.speed * FUTURE_DT * np.arange(1, WAYPOINTS + 1)
        if self.straight:
            x, y = ego.x + ahead * np.cos(ego.yaw), ego.y + ahead * np.sin(ego.yaw)
            yaw = np.full(WAYPOINTS, ego.yaw)
        else:
            s = self.sim.route_position()[0] + ahead
            x, y = route.offset_point(s, EGO_LANE_D + self.offset)
            yaw = route.pose_at(s)[2]
        poses = np.stack([x, y, yaw], axis=1)
        local = to_frame(np.array([ego.x, ego.y, ego.yaw]), poses)
        return Plan(t0=self.sim.t, trajectories=local[None], dt=FUTURE_DT, coc_text="")


def drive(make_planner, block: str, seconds: float, latency_ms: float = 100.0) -> dict:
    settings = DriveSettings(seconds, latency_ms=latency_ms, width=32, height=24,
                             blocks=(block,))
    return ClosedLoopDrive(SEED, make_planner, MODEL, settings, "test").run().metrics


def test_a_planner_blind_to_parked_cars_hits_one_and_the_expert_does_not():
    blind = drive(lambda sim: RoutePlanner(sim, 9.0), "parked", 7.0)
    print(blind["collision_events"])
    assert [e["kind"] for e in blind["collision_events"]] == ["parked"]
    assert blind["collision_events"][0]["other_speed"] == 0.0
    assert blind["scenarios"][0]["kind"] == "nudge_parked"
    assert blind["scenarios"][0]["collisions"] == 1
    expert = drive(lambda sim: ExpertPlanner(sim, EXPERT_WAYPOINTS), "parked", 7.0, 200.0)
    assert expert["collisions"] == 0 and expert["off_road_s"] == 0
    assert expert["route_completion"] > 0.95
    assert expert["engaged_at_s"] == pytest.approx(1.5)
    assert 0.2 <= expert["plan_age_s"]["p50"] <= expert["plan_age_s"]["max"] <= 0.41
    assert expert["fallback_s"] == pytest.approx(0.2)
    assert expert["window_rejections"] == {}


def test_a_planner_blind_to_the_light_runs_the_red_and_the_expert_stops():
    blind = drive(lambda sim: RoutePlanner(sim, 11.0), "red_light", 8.0)
    assert blind["red_light_violations"] == 1
    assert blind["scenarios"][0]["red_light_violations"] == 1
    expert = drive(lambda sim: ExpertPlanner(sim, EXPERT_WAYPOINTS), "red_light", 8.0,
                   200.0)
    assert expert["red_light_violations"] == 0 and expert["collisions"] == 0
    assert expert["scenarios"][0]["min_speed_mps"] < blind["scenarios"][0]["min_speed_mps"] - 3


def test_the_plan_trace_shows_each_followed_plan_against_the_stop_line():
    settings = DriveSettings(5.0, latency_ms=100.0, width=32, height=24, blocks=("red_light",))
    result = ClosedLoopDrive(SEED, lambda sim: RoutePlanner(sim, 11.0), MODEL, settings,
                             "test").run()
    rows = plan_trace(result)
    assert len(rows) == len(result.plans) >= 10
    assert [r["t0"] for r in rows] == sorted(r["t0"] for r in rows)
    lines = [r["stop_line_ahead_m"] for r in rows if r["stop_line_ahead_m"] != ""]
    assert len(lines) >= 5 and lines == sorted(lines, reverse=True)
    assert {r["light"] for r in rows if r["light"]} <= {"green", "yellow", "red"}
    for r in rows:
        assert r["plan_speed_1s"] == pytest.approx(11.0, abs=0.05)
        assert r["plan_distance_m"] == pytest.approx(11.0 * FUTURE_DT * WAYPOINTS, rel=0.01)
        assert r["coc"] == "" and r["ready_at"] == pytest.approx(r["t0"] + 0.1, abs=0.11)
    speeds = {round(t, 2): v for t, v in zip(result.rows[:, 0], result.rows[:, 4])}
    assert rows[-1]["ego_speed_mps"] == pytest.approx(speeds[round(rows[-1]["t0"], 2)],
                                                      abs=1e-3)
    for r in rows:
        assert abs(r["lane_offset_m"]) < 0.3
        for key in ("plan_offset_1s", "plan_offset_3s", "plan_offset_end"):
            assert abs(r[key]) < 0.05, (r["t0"], key, r[key])


def test_the_plan_trace_shows_a_plan_that_keeps_beside_the_lane_centre():
    settings = DriveSettings(6.0, latency_ms=100.0, width=32, height=24, blocks=("turn",))
    result = ClosedLoopDrive(SEED, lambda sim: RoutePlanner(sim, 9.0, offset=-1.0), MODEL,
                             settings, "test").run()
    rows = plan_trace(result)
    assert len(rows) >= 20
    for r in rows:
        for key in ("plan_offset_1s", "plan_offset_3s", "plan_offset_end"):
            assert r[key] == pytest.approx(-1.0, abs=0.05), (r["t0"], key, r[key])
    assert rows[-1]["lane_offset_m"] == pytest.approx(-1.0, abs=0.3)


def test_the_plan_trace_shows_the_gap_to_the_lead_closing_until_the_blind_planner_hits_it():
    settings = DriveSettings(14.0, latency_ms=100.0, width=32, height=24, blocks=("lead",))
    result = ClosedLoopDrive(SEED, lambda sim: RoutePlanner(sim, 14.0), MODEL, settings,
                             "test").run()
    hits = [e for e in result.metrics["collision_events"] if e["kind"] == "lead"]
    assert hits, result.metrics["collision_events"]
    assert 0.0 <= hits[0]["other_speed"] < hits[0]["speed"] - 5.0
    trace = plan_trace(result)
    rows = [r for r in trace if r["t0"] <= hits[0]["t"]]
    gaps = [r["lead_gap_m"] for r in rows if r["lead_gap_m"] != ""]
    assert len(gaps) >= 5 and gaps[-1] < 2.0 and gaps[-1] < gaps[0] - 5.0
    closing = [r for r in rows if r["lead_gap_m"] != ""]
    assert all(0.0 <= r["lead_speed_mps"] < r["ego_speed_mps"] for r in closing[-3:])
    [hit] = collision_context(hits, trace, result.plans)
    before = hit["before"]
    assert hit["t"] - 2.2 < before["t0"] <= hit["t"] - 2.0
    assert before["lead_gap_m"] > gaps[-1] + 10.0 and before["plan_speed_3s"] > 13.0
    contact = hit["at_contact"]
    assert contact["plan_clearance_m"] < 0.0 and contact["tracking_error_m"] < 0.5, contact
    text = markdown({"variants": {}, "through_ros": False, "seeds": [SEED], "seconds": 14.0,
                     "latency": "100 ms", "model_dir": "m",
                     "drives": [{"variant": "test", "seed": SEED, "collisions": 1,
                                 "collision_events": [hit], "red_light_violations": 0,
                                 "off_road_s": 0.0, "route_completion": 1.0,
                                 "plan_age_s": {"p50": 0.2}}]})
    row = [line for line in text.splitlines() if line.startswith(f"| test | {SEED} | ")][0]
    assert f"| lead | {hit['speed']:.2f} | {hit['other_speed']:.2f} | " in row
    assert f"| {before['lead_gap_m']} | {before['lead_speed_mps']} | " in row
    assert row.endswith(f"| {contact['plan_clearance_m']} | {contact['tracking_error_m']} |")
    free = ClosedLoopDrive(SEED, lambda sim: RoutePlanner(sim, 9.0), MODEL,
                           DriveSettings(4.0, latency_ms=100.0, width=32, height=24,
                                         blocks=("parked",)), "test").run()
    assert {r["lead_gap_m"] for r in plan_trace(free)} == {""}


def test_a_planner_blind_to_the_road_leaves_it_in_the_turn():
    straight = drive(lambda sim: RoutePlanner(sim, 9.0, straight=True), "turn", 6.0)
    assert straight["off_road_s"] > 0.5 and straight["lane_departure_s"] > 0.5
    assert straight["route_completion"] < 0.9
    lane = drive(lambda sim: RoutePlanner(sim, 9.0), "turn", 6.0)
    assert lane["off_road_s"] == 0 and lane["lane_departure_s"] == 0


def test_the_lane_offset_shows_a_plan_that_keeps_beside_the_lane_centre():
    centred = drive(lambda sim: RoutePlanner(sim, 9.0), "turn", 6.0)["lane_offset_m"]
    right = drive(lambda sim: RoutePlanner(sim, 9.0, offset=-1.0), "turn", 6.0)
    assert abs(centred["mean"]) < 0.15 and centred["abs_p95"] < 0.3
    assert -1.1 < right["lane_offset_m"]["mean"] < -0.6
    assert 0.8 < right["lane_offset_m"]["abs_p95"] < 1.3
    assert right["off_road_s"] == 0 and right["lane_departure_s"] > 1.0


def road_users(world) -> list[tuple]:
    return [(v.kind, v.color, round(float(v.s), 3)) for v in world.vehicles] + [
        (p.speed, round(float(p.trigger_s), 3)) for p in world.pedestrians]


def test_a_short_drive_in_a_longer_drives_world_is_the_start_of_that_drive(tmp_path):
    long = build_world(SEED, 60.0)
    assert build_world(SEED, 2.0).style != long.style
    settings = DriveSettings(2.0, latency_ms=100.0, width=32, height=24, world_seconds=60.0)
    drive = ClosedLoopDrive(SEED, lambda sim: ExpertPlanner(sim, EXPERT_WAYPOINTS), MODEL,
                            settings, "test")
    assert drive.sim.world.style == long.style
    assert drive.sim.world.route.length == long.route.length
    assert road_users(drive.sim.world) == road_users(long)
    with pytest.raises(ValueError, match="world_seconds must be >= seconds"):
        DriveSettings(5.0, world_seconds=4.0)

    out = tmp_path / "out"
    assert main(["--model-dir", str(make_tiny_model_dir(tmp_path / "model")), "--seconds",
                 "2", "--world-seconds", "60", "--seed", str(SEED), "--out", str(out),
                 "--variants", "expert", "--latency-ms", "100", "--width", "32", "--height",
                 "24", "--no-pictures", "--quiet"]) == 0
    report = json.loads((out / "report.json").read_text())
    d = report["drives"][0]
    assert report["world_seconds"] == d["world_seconds"] == 60.0 and d["seconds"] == 2.0
    assert d["collisions"] == 0 and d["route_completion"] > 0.95
    assert "1 seeds x 2 s (the start of each seed's 60 s drive)" in (
        out / "report.md").read_text()


def test_cli_compares_baseline_and_flashdrive_on_the_tiny_model(tmp_path, one_thread):
    model = make_tiny_model_dir(tmp_path / "model")
    out = tmp_path / "out"
    code = main(["--model-dir", str(model), "--seconds", "2.5", "--seed", str(SEED),
                 "--out", str(out), "--mode", "compare", "--latency-ms", "150",
                 "--width", "64", "--height", "48", "--quiet"])
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    assert set(report["variants"]) == {"baseline", "flashdrive"}
    assert [d["variant"] for d in report["drives"]] == ["baseline", "flashdrive"]
    for d in report["drives"]:
        for key in ("collisions", "red_light_violations", "off_road_s", "route_completion",
                    "scenarios", "comfort", "plan_age_s"):
            assert key in d
        assert d["plans"] >= 3 and d["engaged_at_s"] == pytest.approx(1.5)
        assert d["plan_age_s"]["p50"] >= 0.15
        assert (out / d["picture"]).read_bytes().startswith(b"\x89PNG")
    assert "flashdrive_vs_baseline" in report
    assert "| route completion |" in (out / "report.md").read_text()
    assert "## Standing at a stop line" in (out / "report.md").read_text()
    assert "## Collisions (the plan followed 2 s before the contact)" in (
        out / "report.md").read_text()
    assert "## Tight bends" in (out / "report.md").read_text()
    for name, block in report["variants"].items():
        waits = [d["light_waits"] for d in report["drives"] if d["variant"] == name]
        assert block["light_waits"]["red_plans"] == sum(w["red_plans"] for w in waits)
        bends = [d["bend_approach"] for d in report["drives"] if d["variant"] == name]
        assert {band: cell["plans"] for band, cell in block["bend_approach"].items()} == {
            band: sum(len(b[band]) for b in bends) for band in BANDS}

    pooled = tmp_path / "pooled"
    assert main(["--model-dir", str(model), "--seconds", "2.5", "--seed", str(SEED),
                 "--out", str(pooled), "--mode", "compare", "--latency-ms", "150",
                 "--width", "64", "--height", "48", "--quiet", "--no-pictures",
                 "--workers", "2", "--threads", "1", "--plan-trace"]) == 0
    pooled_drives = json.loads((pooled / "report.json").read_text())["drives"]
    with open(pooled / pooled_drives[1]["plan_trace"]) as f:
        trace = list(csv.DictReader(f))
    assert pooled_drives[1]["plan_trace"] == f"plans_flashdrive_{SEED}.csv"
    assert tuple(trace[0]) == FIELDS
    assert pooled_drives[1]["plans"] - 1 <= len(trace) <= pooled_drives[1]["plans"]
    assert all(row["coc"] for row in trace)
    same = ("variant", "seed", "plans", "collisions", "off_road_s", "route_completion",
            "red_light_violations", "plan_age_s")
    assert [{k: d[k] for k in same} for d in json.loads(
        (pooled / "report.json").read_text())["drives"]] == \
        [{k: d[k] for k in same} for d in report["drives"]]
    assert main(["--model-dir", str(model), "--seconds", "1", "--seed", "1", "--out",
                 str(out), "--variants", "nonsense"]) == 2
    assert main(["--model-dir", str(model), "--seconds", "1", "--seed", "1", "--out",
                 str(out), "--through-ros", "--workers", "2"]) == 2


@pytest.mark.ros
def test_a_drive_through_the_node_tracks_its_published_trajectories(tmp_path):
    model = make_tiny_model_dir(tmp_path / "model")
    out = tmp_path / "out"
    code = main(["--model-dir", str(model), "--seconds", "3", "--seed", str(SEED), "--out",
                 str(out), "--through-ros", "--rate", "0.5", "--width", "64", "--height", "48",
                 "--node-param", "cpu_threads=1", "--no-pictures", "--quiet"])
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    d = report["drives"][0]
    print({k: v for k, v in d.items() if k != "scenarios"})
    assert report["through_ros"] is True and d["variant"] == "flashdrive"
    assert d["plans"] >= 1 and d["trajectories_received"] >= d["plans"]
    assert 0 < d["latency_ms"]["p50"] and d["plan_age_s"]["p50"] > 0
    assert "use_sim_time: true" in (out / f"node_flashdrive_{SEED}").joinpath(
        Path(d["node_log"]).with_suffix(".yaml").name).read_text()
    assert main(["--model-dir", str(model), "--seconds", "1", "--seed", "1", "--out",
                 str(out), "--through-ros", "--latency-ms", "100"]) == 2
    for bad in ("mode=baseline", "no_such_param=1", "max_plan_age_s=-1"):
        assert main(["--model-dir", str(model), "--seconds", "1", "--seed", "1", "--out",
                     str(out), "--through-ros", "--node-param", bad]) == 2


def test_forward_only_reaches_the_engine_and_the_node_parameters(tmp_path):
    from flashdrive_ros.closed_loop.cli import options_from_args, parser
    from flashdrive_ros.closed_loop.through_ros import node_parameters
    from flashdrive_ros.closed_loop.variants import engine_config

    model_dir = make_tiny_model_dir(tmp_path / "model")
    base = ["--model-dir", str(model_dir), "--seconds", "2", "--seed", "1000000", "--out",
            str(tmp_path / "out")]
    assert options_from_args(parser().parse_args(base)).forward_only is True
    plain = options_from_args(parser().parse_args([*base, "--forward-only", "off"]))
    assert plain.forward_only is False
    assert engine_config("flashdrive", "cpu", "float32", 1, None, False).forward_only is False
    ros = options_from_args(parser().parse_args([*base, "--through-ros", "--forward-only",
                                                 "off"]))
    assert node_parameters(ros, tiny(512), "flashdrive")["forward_only"] is False
    with pytest.raises(SystemExit):
        parser().parse_args([*base, "--forward-only", "maybe"])


def test_seed_list_or_a_run_of_seeds(tmp_path):
    from flashdrive_ros.closed_loop.cli import main, options_from_args, parser

    base = ["--model-dir", str(tmp_path), "--seconds", "2", "--out", str(tmp_path / "out")]
    run = options_from_args(parser().parse_args([*base, "--seed", "1000207", "--drives", "3"]))
    assert run.seeds == (1000207, 1000208, 1000209)
    listed = options_from_args(parser().parse_args([*base, "--seeds", "1000224,1000207"]))
    assert listed.seeds == (1000224, 1000207)
    with pytest.raises(SystemExit):
        parser().parse_args([*base, "--seed", "1", "--seeds", "2,3"])
    with pytest.raises(SystemExit):
        parser().parse_args(base)
    for bad in (["--seeds", "1000207,x"], ["--seeds", "5,5"], ["--seed", "1", "--drives", "0"]):
        assert main([*base, *bad]) == 2
