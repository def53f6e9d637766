"""A reference planner that reads the world instead of the cameras: the rule-based expert
driven ahead on a copy of the simulator from the ego's state now. It shows what the tracking
controller and the latency alone cost, and is the known-good planner of the tests."""

from __future__ import annotations


from flashdrive_ros.engine.types import Plan, Window
from flashdrive_ros.sim.disturbed_drive import expert_poses
from flashdrive_ros.sim.drive import FUTURE_DT, FUTURE_STEPS, SUBSTEPS, to_frame
from flashdrive_ros.sim.ego_world import EgoWorld


class ExpertPlanner:
    """`step(window)` plans from the simulator's state now (its plan's t0 is the simulator's
    time, at or after the window's)."""

    def __init__(self, sim: EgoWorld, num_waypoints: int = FUTURE_STEPS) -> None:
        self.sim = sim
        self.num_waypoints = num_waypoints

    def reset(self) -> None:
        return None

    def step(self, window: Window) -> Plan:
        poses = expert_poses(self.sim.fork(), self.num_waypoints * SUBSTEPS)  # [steps + 1, 3]
        trajectory = to_frame(poses[0], poses[SUBSTEPS::SUBSTEPS])  # [N_wp, 3]
        return Plan(t0=self.sim.t, trajectories=trajectory[None], dt=FUTURE_DT,
                    coc_text="expert", mode="expert")
