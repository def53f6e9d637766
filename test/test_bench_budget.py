import time

import pytest

from flashdrive_ros.bench.engine_run import MIN_WINDOWS, OverBudget, timed_windows
from flashdrive_ros.bench.shapes import shape_config
from flashdrive_ros.bench.suite import job_order


class Parts:
    cfg = shape_config("tiny")


def slow_step(seconds: float):
    def step(window):
        time.sleep(seconds)
        return window.sequence
    return step


def test_windows_shrink_to_what_the_warmup_rate_fits():
    deadline = time.monotonic() + 1.0
    done = timed_windows(slow_step(0.05), Parts, 0, 1, 50, deadline)
    assert MIN_WINDOWS <= len(done) <= 19 and done[0] == 1
    assert time.monotonic() <= deadline + 0.25


def test_a_variant_that_cannot_fit_three_windows_is_refused_with_the_reason():
    with pytest.raises(OverBudget, match="3 windows of 0.0[0-9] s do not fit"):
        timed_windows(slow_step(0.05), Parts, 0, 1, 50, time.monotonic() + 0.05)
    assert timed_windows(slow_step(0.0), Parts, 0, 1, 4, None) == [1, 2, 3, 4]


def test_the_reference_runs_after_the_full_method_variants():
    names = ["flashdrive", "flashdrive_at_5.6_block8", "cuda_graphs", "baseline", "streaming"]
    assert job_order(names, True) == ["flashdrive", "flashdrive_at_5.6_block8", "cuda_graphs",
                                      "reference", "baseline", "streaming"]
    assert job_order(names, False) == names
    assert job_order(["flashdrive"], True) == ["flashdrive", "reference"]
