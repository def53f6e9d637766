"""Jobs spread over worker processes, each with its torch and OpenCV thread counts set."""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


def set_worker_threads(threads: int) -> None:
    """torch and OpenCV (JPEG decoding, rendering) on `threads` threads."""
    import cv2
    import torch

    torch.set_num_threads(threads)
    cv2.setNumThreads(threads)


@contextmanager
def threads_within(threads: int) -> Iterator[None]:
    """torch and OpenCV on `threads` threads inside the block, on their former counts after."""
    import cv2
    import torch

    before = torch.get_num_threads(), cv2.getNumThreads()
    set_worker_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before[0])
        cv2.setNumThreads(before[1])


def map_in_processes(job: Callable[[Item], Result], items: Iterable[Item], workers: int,
                     threads_per_worker: int) -> list[Result]:
    """[job(item) for item in items], in order; one worker (or one item): in this process on
    `threads_per_worker` threads, so that a job run alone computes what it computes in a pool
    (the thread count changes the float reduction order, and a closed-loop drive can follow
    it); more: that many spawned processes (job and items must pickle)."""
    items = list(items)
    workers = min(workers, len(items))
    if workers <= 1:
        with threads_within(threads_per_worker):
            return [job(item) for item in items]
    with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"),
                             initializer=set_worker_threads,
                             initargs=(threads_per_worker,)) as pool:
        return list(pool.map(job, items))
