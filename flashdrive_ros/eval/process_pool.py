"""Jobs spread over worker processes, each with its torch and OpenCV thread counts set."""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from typing import TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


def set_worker_threads(threads: int) -> None:
    """torch and OpenCV (JPEG decoding, rendering) on `threads` threads."""
    import cv2
    import torch

    torch.set_num_threads(threads)
    cv2.setNumThreads(threads)


def map_in_processes(job: Callable[[Item], Result], items: Iterable[Item], workers: int,
                     threads_per_worker: int) -> list[Result]:
    """[job(item) for item in items], in order; workers 1: in this process, its threads left
    as they are; more: that many spawned processes (job and items must pickle)."""
    items = list(items)
    workers = min(workers, len(items))
    if workers <= 1:
        return [job(item) for item in items]
    with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"),
                             initializer=set_worker_threads,
                             initargs=(threads_per_worker,)) as pool:
        return list(pool.map(job, items))
