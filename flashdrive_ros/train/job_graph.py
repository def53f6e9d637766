"""Data jobs of every kind on one pool of worker processes. A kind of training drive is a
`Plan`: per seed, a search (`find`) whose result gives the jobs that make its drives (`make`),
or the make jobs alone. Every plan's searches go out first, then the make jobs whose search is
done, the costliest first, so that no core waits for one kind of drive to be finished before
the next kind starts, and no long job starts last."""

from __future__ import annotations

import heapq
import multiprocessing as mp
import os
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Plan:
    """`args`: one per seed. Without `find`, each arg is a job of `make`; with it,
    `jobs(arg, find(arg))` lists the jobs of `make` for that seed. `cost(job)`: the make
    job's expected seconds (higher goes out first). `finish(results)`: the plan's results
    from its make results in order (default: those). `find` and `make` run in worker
    processes (module-level functions); `jobs`, `cost` and `finish` in this one."""

    name: str
    args: list
    make: Callable[[Any], Any]
    find: Callable[[Any], Any] | None = None
    jobs: Callable[[Any, Any], list] | None = None
    cost: Callable[[Any], float] = field(default=lambda job: 0.0)
    finish: Callable[[list], list] = field(default=lambda results: results)

    def __post_init__(self) -> None:
        if (self.find is None) != (self.jobs is None):
            raise ValueError(f"plan {self.name}: find and jobs come together")


@dataclass
class PlanTimes:
    """Seconds from the start until a plan's last search and last make job were done."""

    found_s: float = 0.0
    made_s: float = 0.0


@dataclass
class Progress:
    """Searches and make jobs done of those known so far (a search adds its make jobs);
    `report(line)` gets a line at most every `every_s` seconds and when all are done."""

    report: Callable[[str], None]
    every_s: float = 30.0
    found: int = 0
    searches: int = 0
    made: int = 0
    makes: int = 0
    _last_s: float = field(default=-float("inf"), repr=False)

    def tick(self, now_s: float) -> None:
        finished = self.found == self.searches and self.made == self.makes
        if finished or now_s - self._last_s >= self.every_s:
            self._last_s = now_s
            self.report(f"data jobs at {now_s:.0f} s: searches {self.found}/{self.searches}, "
                        f"drives {self.made}/{self.makes} (of those known so far)")


def run_plans(plans: list[Plan], workers: int | None = None,
              report: Callable[[str], None] | None = None
              ) -> tuple[list[list], dict[str, PlanTimes]]:
    """Every plan's results (`finish` of its make results in seed order, then job order
    within a seed), and when each plan was done; on `workers` spawned processes (default all
    cores; 1: in this process). `report`: a progress line now and then (Progress)."""
    start = time.monotonic()
    progress = Progress(report or (lambda line: None))
    ready: list[tuple] = []  # heap of (is_make, -cost, order, plan, seed, job index, job)
    made: list[dict] = [{} for _ in plans]
    times = {plan.name: PlanTimes() for plan in plans}
    order = 0

    def push(is_make: bool, cost: float, p: int, seed: int, index: int, job) -> None:
        nonlocal order
        heapq.heappush(ready, (is_make, -cost, order, p, seed, index, job))
        order += 1

    def add_jobs(p: int, seed: int, jobs: list) -> None:
        progress.makes += len(jobs)
        for index, job in enumerate(jobs):
            push(True, float(plans[p].cost(job)), p, seed, index, job)

    for p, plan in enumerate(plans):
        for seed, arg in enumerate(plan.args):
            if plan.find is None:
                add_jobs(p, seed, [arg])
            else:
                progress.searches += 1
                push(False, 0.0, p, seed, 0, arg)

    def done(task: tuple, result) -> None:
        is_make, _, _, p, seed, index, job = task
        now = time.monotonic() - start
        plan = plans[p]
        if is_make:
            made[p][(seed, index)] = result
            times[plan.name].made_s = now
            progress.made += 1
        else:
            times[plan.name].found_s = now
            progress.found += 1
            add_jobs(p, seed, plan.jobs(job, result))
        progress.tick(now)

    def function(task: tuple) -> Callable:
        plan = plans[task[3]]
        return plan.make if task[0] else plan.find

    count = sum(len(plan.args) for plan in plans)
    workers = min(workers or os.cpu_count() or 1, max(count, 1))
    if workers <= 1:
        while ready:
            task = heapq.heappop(ready)
            done(task, function(task)(task[6]))
    else:
        with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
            running: dict[Future, tuple] = {}
            while ready or running:
                while ready and len(running) < workers:
                    task = heapq.heappop(ready)
                    running[pool.submit(function(task), task[6])] = task
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    done(running.pop(future), future.result())
    return [plan.finish([results[key] for key in sorted(results)])
            for plan, results in zip(plans, made)], times
