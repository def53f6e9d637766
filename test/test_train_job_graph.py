"""Data jobs on one pool: every plan's results come back in seed and job order, the same on
worker processes as in this process, searches go out before make jobs and make jobs by cost,
and a failing job fails the run."""

import math

import pytest

from flashdrive_ros.train.job_graph import Plan, run_plans


def plans(calls: list | None = None) -> list[Plan]:
    def noted(name, function):
        if calls is None:
            return function

        def call(arg):
            calls.append((name, arg))
            return function(arg)
        return call

    return [
        Plan("square", [3, 1, 2], noted("square", math.factorial), cost=float),
        Plan("ranges", [4, 0, 2], noted("make", math.factorial), find=noted("find", range),
             jobs=lambda arg, found: [arg * 10 + k for k in found], cost=lambda job: -job),
    ]


def test_results_come_back_in_seed_and_job_order_alike_on_workers_and_in_process():
    alone, times = run_plans(plans(), workers=1)
    assert alone == [[6, 1, 2], [math.factorial(k) for k in (40, 41, 42, 43, 20, 21)]]
    assert set(times) == {"square", "ranges"}
    assert all(t.made_s >= t.found_s >= 0.0 for t in times.values())
    parallel, _ = run_plans(plans(), workers=3)
    assert parallel == alone


def test_searches_go_out_first_then_make_jobs_by_cost():
    calls: list = []
    run_plans(plans(calls), workers=1)
    assert calls[:3] == [("find", 4), ("find", 0), ("find", 2)]
    assert calls[3:] == [("square", 3), ("square", 2), ("square", 1), ("make", 20),
                         ("make", 21), ("make", 40), ("make", 41), ("make", 42), ("make", 43)]


def test_a_plan_needs_find_and_jobs_together_and_a_failing_job_fails_the_run():
    with pytest.raises(ValueError, match="find and jobs"):
        Plan("half", [1], abs, find=range)
    with pytest.raises(ValueError):
        run_plans([Plan("bad", [2, -1], math.factorial)], workers=2)
    with pytest.raises(ValueError):
        run_plans([Plan("bad", [2, -1], math.factorial)], workers=1)


def test_progress_lines_count_searches_and_the_make_jobs_they_add_and_end_with_all_done():
    lines: list[str] = []
    run_plans(plans(), workers=1, report=lines.append)
    assert lines[0] == "data jobs at 0 s: searches 1/3, drives 0/7 (of those known so far)"
    assert lines[-1].endswith("searches 3/3, drives 9/9 (of those known so far)")
    parallel: list[str] = []
    run_plans(plans(), workers=2, report=parallel.append)
    assert parallel[-1].endswith("searches 3/3, drives 9/9 (of those known so far)")
