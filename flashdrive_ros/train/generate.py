"""Simulated drives for training, rendered in parallel worker processes.

A drive is simulated once, each 10 Hz frame rendered once per camera at the simulator's
camera resolution and resized to the model's input size with the model's own preprocessing
resize (so training pixels equal what inference feeds the vision encoder), then labelled.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from flashdrive_ros.model.config import ModelConfig
from flashdrive_ros.sim.disturbance import Disturbance
from flashdrive_ros.sim.drive import FRAME_HZ
from flashdrive_ros.sim.lamp_pairs import LAMP_PAIR_TAG, LampPairs, pair_logs
from flashdrive_ros.sim.lane_forks import LaneFork, LaneForks, lane_fork_log, seed_lane_forks
from flashdrive_ros.sim.lead_stops import (
    Contrast,
    LeadStop,
    LeadStops,
    lead_stop_log,
    seed_lead_stops,
)
from flashdrive_ros.sim.light_branches import Fork, LightBranches, fork_log, seed_forks
from flashdrive_ros.train.drive import Drive
from flashdrive_ros.train.job_graph import Plan, run_plans
from flashdrive_ros.train.scene_readout import scene_readings
from flashdrive_ros.train.sensor_noise import NO_NOISE, SensorNoise, camera_effects, measured_poses

if TYPE_CHECKING:
    from flashdrive_ros.train.policy_drive import PolicySpec

SIM_IMPORT_ERROR = "the simulator (flashdrive_ros.sim) is needed to generate training drives"


def is_disturbed(seed: int, share: float) -> bool:
    """Whether the training drive of `seed` is driven with disturbances, for a `share` of
    seeds."""
    return bool(np.random.default_rng([seed, 31]).random() < share)


def generate_drive(seed: int, seconds: float, image_size: tuple[int, int],
                   noise: SensorNoise = NO_NOISE, disturbance: Disturbance | None = None,
                   policy: PolicySpec | None = None, plan_futures: bool = False,
                   standing_lead: bool = False) -> Drive:
    """image_size: (height, width) of the model input; noise: what the odometry and the
    cameras add to the simulated truth (the expert's future stays exact); disturbance: the
    ego is pushed off its course and the expert's future is its way back
    (sim/disturbed_drive.py); policy: the ego is driven by that planner in closed loop and the
    expert labels each frame from where it is (train/policy_drive.py); plan_futures: each
    frame's future is the expert's plan with the lights held as the frame shows them (else
    what the expert went on to do, as disturbed drives did before); standing_lead: a lead
    that stands ahead is labelled a stop (sim/labels.py)."""
    import torch

    from flashdrive_ros.sim.disturbed_drive import simulate_disturbed
    from flashdrive_ros.sim.drive import simulate

    if disturbance is not None and policy is not None:
        raise ValueError("a drive is disturbed or driven by a policy, not both")
    torch.set_num_threads(1)
    if policy is not None:
        from flashdrive_ros.train.policy_drive import policy_log

        log = policy_log(seed, seconds, policy)
    elif disturbance is not None or plan_futures:
        log = simulate_disturbed(seed, seconds, disturbance, hold_lights=plan_futures)
    else:
        log = simulate(seed, seconds)
    return drive_from_log(log, seed, image_size, noise, standing_lead)


def drive_from_log(log, seed: int, image_size: tuple[int, int], noise: SensorNoise,
                   standing_lead: bool = False) -> Drive:
    """A simulated drive (sim.drive.DriveLog) rendered, resized to image_size, labelled
    (standing_lead as in `generate_drive`) and given the sensor noise drawn from its seed."""
    import torch

    from flashdrive_ros.model.preprocess import resize_images
    from flashdrive_ros.sim.drive import SUBSTEPS
    from flashdrive_ros.sim.labels import DECISIONS, label_drive
    from flashdrive_ros.sim.render import Renderer

    count = log.frame_count
    renderer = Renderer(log.world)
    labels = label_drive(log.infos, count, standing_lead)
    frames = np.empty((count, len(renderer.cameras), *image_size, 3), dtype=np.uint8)
    for k in range(count):
        views = np.stack(renderer.render(log.scenes[k]))  # views: [N_cam, H_cam, W_cam, 3]
        resized = resize_images(views, image_size)  # resized: [N_cam, 3, h, w] in [0, 255]
        frames[k] = resized.permute(0, 2, 3, 1).to(torch.uint8).numpy()
    rows = log.ego[np.arange(count) * SUBSTEPS]  # rows: t, x, y, yaw, v, yaw_rate, accel
    stamps = np.arange(count) / FRAME_HZ
    rng = np.random.default_rng([seed, 7])
    poses = measured_poses(noise, rng, log.ego, stamps)
    frames = camera_effects(noise, rng, frames)
    future = np.stack([log.future(k) for k in range(count)])
    decision = np.array([DECISIONS.index(label.decision) for label in labels], dtype=np.int64)
    scenario = ",".join(span.kind for span in log.world.spans)
    return Drive(seed, scenario, 1.0 / FRAME_HZ, frames, stamps, poses, rows[:, 4].copy(),
                 [label.coc for label in labels], decision, future,
                 [",".join(label.tags) for label in labels],
                 scene_readings(log.infos[:count], log.world.route))


DriveJob = tuple[int, float, tuple[int, int], SensorNoise, Disturbance | None,
                 "PolicySpec | None", bool, bool]


def _worker(args: DriveJob) -> Drive:
    return generate_drive(*args)


def _job_cost(job: DriveJob) -> float:
    """Relative cost of a drive job: policy drives (a model plans every frame), then
    disturbed drives (a fork of the world per disturbed frame), then drives with plan
    futures, then plain ones, each by its length."""
    _, seconds, _, _, disturbance, policy, plan_futures, _ = job
    per_s = 8.0 if policy is not None else 2.0 if disturbance is not None else (
        1.5 if plan_futures else 1.0)
    return per_s * seconds


def drive_jobs(seeds: list[int], seconds: float, cfg: ModelConfig,
               noise: SensorNoise = NO_NOISE, disturbance: Disturbance | None = None,
               disturbed_share: float = 0.0, policy: PolicySpec | None = None,
               plan_futures: bool = False, standing_lead: bool = False) -> list[DriveJob]:
    """`generate_drive` arguments for `seeds`: the `is_disturbed` share of them driven with
    `disturbance`, or all of them by `policy`; plan_futures and standing_lead as in
    `generate_drive`."""
    if disturbed_share > 0 and disturbance is None:
        raise ValueError("disturbed_share > 0 needs a disturbance")
    if policy is not None and disturbed_share > 0:
        raise ValueError("policy drives are not disturbed: disturbed_share must be 0")
    size = (cfg.prompt.image_height, cfg.prompt.image_width)
    return [(int(seed), float(seconds), size, noise,
             disturbance if is_disturbed(int(seed), disturbed_share) else None, policy,
             plan_futures, standing_lead)
            for seed in seeds]


def drive_plan(jobs: list[DriveJob]) -> Plan:
    """The `Plan` of `jobs`: one drive each."""
    return Plan("drives", jobs, _worker, cost=_job_cost)


def _run_one(plan: Plan, workers: int | None,
             report: Callable[[str], None] | None = None) -> list:
    return run_plans([plan], workers, report)[0][0]


def run_drive_jobs(jobs: list[DriveJob], workers: int | None = None) -> list[Drive]:
    """The drives of `jobs` in job order, made by `workers` processes (default: all cores);
    the slowest kinds are handed out first so that no long drive starts last."""
    return _run_one(drive_plan(jobs), workers)


def _forks_worker(args: tuple[int, float, LightBranches]) -> tuple[float, int, list[Fork]]:
    seed, seconds, spec = args
    log, forks = seed_forks(seed, seconds, spec)
    return log.seconds, log.frame_count, forks


ForkJob = tuple[int, float, int, Fork, tuple[int, int], SensorNoise, LightBranches, bool]


def _fork_worker(args: ForkJob) -> Drive | None:
    import torch

    seed, seconds, frame_count, fork, image_size, noise, spec, standing_lead = args
    torch.set_num_threads(1)
    log = fork_log(seed, seconds, frame_count, fork, spec)
    return None if log is None else drive_from_log(log, seed, image_size, noise, standing_lead)


def _fork_cost(job: ForkJob) -> float:
    """Relative cost of a light fork: stand-back forks (an expert plan per standing frame)
    above the others, then the longest holds."""
    fork = job[3]
    return (30.0 if fork.rest_s is not None else 10.0) + fork.hold_at - fork.frame / FRAME_HZ


def light_branch_plan(seeds: list[int], seconds: float, cfg: ModelConfig,
                      spec: LightBranches, noise: SensorNoise = NO_NOISE,
                      standing_lead: bool = False) -> Plan:
    """The `Plan` of `light_branch_drives`."""
    size = (cfg.prompt.image_height, cfg.prompt.image_width)
    return Plan("light_branches", [(int(seed), float(seconds), spec) for seed in seeds],
                _fork_worker, find=_forks_worker,
                jobs=lambda arg, found: [(arg[0], found[0], found[1], fork, size, noise, spec,
                                          standing_lead) for fork in found[2]],
                cost=_fork_cost,
                finish=lambda made: [drive for drive in made if drive is not None])


def light_branch_drives(seeds: list[int], seconds: float, cfg: ModelConfig,
                        spec: LightBranches, noise: SensorNoise = NO_NOISE,
                        workers: int | None = None, standing_lead: bool = False
                        ) -> list[Drive]:
    """The forks of the seeds' red-light waits with the light changed
    (sim/light_branches.py), rendered and labelled like drives (standing_lead as in
    `generate_drive`), in seed order. The seeds'
    forks are drawn first, then every fork is one job, the slowest handed out first."""
    if not spec.enabled or not seeds:
        return []
    return _run_one(light_branch_plan(seeds, seconds, cfg, spec, noise, standing_lead),
                    workers)


def _lead_stops_worker(args: tuple[int, float, LeadStops]) -> list[LeadStop]:
    return seed_lead_stops(*args)


LeadStopJob = tuple[int, float, LeadStop, tuple[int, int], SensorNoise, LeadStops, bool]


def _lead_stop_worker(args: LeadStopJob) -> Drive:
    import torch

    seed, seconds, stop, image_size, noise, spec, standing_lead = args
    torch.set_num_threads(1)
    log, contrasts = lead_stop_log(seed, seconds, stop, spec)
    drive = drive_from_log(log, seed, image_size, noise, standing_lead)
    return with_contrasts(drive, log, contrasts, standing_lead)


def with_contrasts(drive: Drive, log, contrasts: dict[int, Contrast],
                   standing_lead: bool = False) -> Drive:
    """`drive` (made from `log`) with the contrasts of its frames, each labelled from the
    contrast's reasoning after the log's frames before it (standing_lead as in
    `generate_drive`)."""
    from flashdrive_ros.sim.labels import DECISIONS, label_frame

    steps = sorted(contrasts)
    labels = [label_frame([*log.infos[:k], contrasts[k].info], k, standing_lead)
              for k in steps]
    return dataclasses.replace(
        drive, contrast_step=np.asarray(steps, dtype=np.int64),
        contrast_coc=[label.coc for label in labels],
        contrast_decision=np.array([DECISIONS.index(label.decision) for label in labels],
                                   dtype=np.int64),
        contrast_future=np.stack([contrasts[k].future for k in steps]) if steps
        else drive.contrast_future)


def lead_stop_plan(seeds: list[int], seconds: float, cfg: ModelConfig, spec: LeadStops,
                   noise: SensorNoise = NO_NOISE, standing_lead: bool = False) -> Plan:
    """The `Plan` of `lead_stop_drives`."""
    size = (cfg.prompt.image_height, cfg.prompt.image_width)
    return Plan("lead_stops", [(int(seed), float(seconds), spec) for seed in seeds],
                _lead_stop_worker, find=_lead_stops_worker,
                jobs=lambda arg, found: [(arg[0], arg[1], stop, size, noise, spec,
                                          standing_lead) for stop in found],
                cost=lambda job: 60.0 if job[5].contrast and not job[2].moving else 30.0)


def lead_stop_drives(seeds: list[int], seconds: float, cfg: ModelConfig, spec: LeadStops,
                     noise: SensorNoise = NO_NOISE, workers: int | None = None,
                     standing_lead: bool = False,
                     report: Callable[[str], None] | None = None) -> list[Drive]:
    """The forks of the seeds' drives with a car standing in the ego lane ahead
    (sim/lead_stops.py), rendered and labelled like drives (standing_lead as in
    `generate_drive`), in seed order. The seeds' stops
    are drawn first, then every stop is one job; `report` as run_plans takes it."""
    if not spec.enabled or not seeds:
        return []
    return _run_one(lead_stop_plan(seeds, seconds, cfg, spec, noise, standing_lead), workers,
                    report)


def _lane_forks_worker(args: tuple[int, LaneForks]) -> list[LaneFork]:
    return seed_lane_forks(*args)


LaneForkJob = tuple[int, LaneFork, tuple[int, int], SensorNoise, LaneForks, bool]


def _lane_fork_worker(args: LaneForkJob) -> Drive:
    import torch

    seed, fork, image_size, noise, spec, standing_lead = args
    torch.set_num_threads(1)
    return drive_from_log(lane_fork_log(seed, fork, spec), seed, image_size, noise,
                          standing_lead)


def lane_fork_plan(seeds: list[int], cfg: ModelConfig, spec: LaneForks,
                   noise: SensorNoise = NO_NOISE, standing_lead: bool = False) -> Plan:
    """The `Plan` of `lane_fork_drives`."""
    size = (cfg.prompt.image_height, cfg.prompt.image_width)
    return Plan("lane_forks", [(int(seed), spec) for seed in seeds], _lane_fork_worker,
                find=_lane_forks_worker,
                jobs=lambda arg, found: [(arg[0], fork, size, noise, spec, standing_lead)
                                         for fork in found],
                cost=lambda job: 40.0)


def lane_fork_drives(seeds: list[int], cfg: ModelConfig, spec: LaneForks,
                     noise: SensorNoise = NO_NOISE, workers: int | None = None,
                     standing_lead: bool = False) -> list[Drive]:
    """The forks of the seeds' drives with the ego drifted towards the inside of a tight
    bend or towards a parked car being passed (sim/lane_forks.py), rendered and labelled like
    drives (standing_lead as in `generate_drive`), in seed order. The seeds' forks are drawn
    first, then every fork is one job."""
    if not spec.enabled or not seeds:
        return []
    return _run_one(lane_fork_plan(seeds, cfg, spec, noise, standing_lead), workers)


def _lamp_pairs_worker(args: tuple[int, float, tuple[int, int], SensorNoise, LampPairs, bool]
                       ) -> list[Drive]:
    import torch

    from flashdrive_ros.sim.drive import simulate

    seed, seconds, image_size, noise, spec, standing_lead = args
    torch.set_num_threads(1)
    logs = pair_logs(simulate(seed, seconds), spec, np.random.default_rng([seed, 29]))
    drives = [drive_from_log(log, seed, image_size, noise, standing_lead) for log in logs]
    for drive in drives:
        drive.tags[-1] = ",".join(filter(None, (drive.tags[-1], LAMP_PAIR_TAG)))
    return drives


def lamp_pair_plan(seeds: list[int], seconds: float, cfg: ModelConfig, spec: LampPairs,
                   noise: SensorNoise = NO_NOISE, standing_lead: bool = False) -> Plan:
    """The `Plan` of `lamp_pair_drives`."""
    size = (cfg.prompt.image_height, cfg.prompt.image_width)
    return Plan("lamp_pairs", [(int(seed), float(seconds), size, noise, spec, standing_lead)
                               for seed in seeds], _lamp_pairs_worker,
                cost=lambda job: job[1],
                finish=lambda made: [drive for drives in made for drive in drives])


def lamp_pair_drives(seeds: list[int], seconds: float, cfg: ModelConfig, spec: LampPairs,
                     noise: SensorNoise = NO_NOISE, workers: int | None = None,
                     standing_lead: bool = False) -> list[Drive]:
    """The lamp pairs of the seeds' red-light waits (sim/lamp_pairs.py), rendered and
    labelled like drives (standing_lead as in `generate_drive`), one window each tagged
    LAMP_PAIR_TAG, in seed order, red before green."""
    if not spec.enabled or not seeds:
        return []
    return _run_one(lamp_pair_plan(seeds, seconds, cfg, spec, noise, standing_lead), workers)


def generate_drives(seeds: list[int], seconds: float, cfg: ModelConfig,
                    workers: int | None = None, noise: SensorNoise = NO_NOISE,
                    disturbance: Disturbance | None = None,
                    disturbed_share: float = 0.0, policy: PolicySpec | None = None,
                    plan_futures: bool = False) -> list[Drive]:
    """Drives for `seeds` in seed order (`drive_jobs`, `run_drive_jobs`)."""
    return run_drive_jobs(drive_jobs(seeds, seconds, cfg, noise, disturbance,
                                     disturbed_share, policy, plan_futures), workers)
