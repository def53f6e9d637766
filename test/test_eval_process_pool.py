"""A job run in this process by map_in_processes computes on the thread count of a worker
process, so that a drive run alone repeats the same drive of a pool; the caller's thread
counts come back afterwards."""

import cv2
import pytest
import torch

from flashdrive_ros.eval.process_pool import map_in_processes


def thread_counts(item):
    return item, torch.get_num_threads(), cv2.getNumThreads()


@pytest.fixture
def two_threads():
    before = torch.get_num_threads(), cv2.getNumThreads()
    torch.set_num_threads(2)
    cv2.setNumThreads(2)
    yield torch.get_num_threads(), cv2.getNumThreads()
    torch.set_num_threads(before[0])
    cv2.setNumThreads(before[1])


def test_one_worker_or_one_item_runs_on_the_worker_thread_count(two_threads):
    assert two_threads == (2, 2)
    assert map_in_processes(thread_counts, [3, 4], 1, 1) == [(3, 1, 1), (4, 1, 1)]
    assert map_in_processes(thread_counts, [5], 2, 1) == [(5, 1, 1)]
    assert (torch.get_num_threads(), cv2.getNumThreads()) == two_threads


def test_the_thread_counts_come_back_when_a_job_fails(two_threads):
    def fail(_):
        raise RuntimeError("job failed")

    with pytest.raises(RuntimeError, match="job failed"):
        map_in_processes(fail, [0], 1, 1)
    assert (torch.get_num_threads(), cv2.getNumThreads()) == two_threads
