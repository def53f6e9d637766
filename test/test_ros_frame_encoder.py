"""FrameEncoder: camera sets encoded on their own thread, newest first."""

import threading
import time

import numpy as np
import pytest

from flashdrive_ros.ros.frame_encoder import FrameEncoder


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_sets_are_encoded_on_the_encoder_thread_newest_first():
    release = threading.Event()
    done, threads, setup = [], [], []

    def encode(stamps, images):
        threads.append(threading.get_ident())
        release.wait(10.0)
        done.append(stamps[0])

    encoder = FrameEncoder(encode, pending=2, worker_setup=lambda: setup.append(1))
    encoder.start()
    try:
        image = [np.zeros((2, 2, 3), np.uint8)]
        encoder.submit([1.0], image)
        wait_for(lambda: threads)
        for stamp in (2.0, 3.0, 4.0):
            encoder.submit([stamp], image)
        release.set()
        wait_for(lambda: len(done) == 3)
        assert done == [1.0, 4.0, 3.0] and encoder.encoded == 3
        assert setup == [1] and set(threads) == {encoder._thread.ident}
        assert threading.get_ident() not in threads
        with pytest.raises(RuntimeError, match="already started"):
            encoder.start()
    finally:
        encoder.stop()
    encoder.submit([5.0], image)
    time.sleep(0.05)
    assert len(done) == 3


def test_a_failed_encode_is_reported_and_the_encoder_goes_on():
    errors, done = [], []

    def encode(stamps, images):
        if stamps[0] < 0:
            raise ValueError("bad frame")
        done.append(stamps[0])

    encoder = FrameEncoder(encode, on_error=errors.append)
    encoder.start()
    try:
        encoder.submit([-1.0], [])
        wait_for(lambda: errors)
        encoder.submit([1.0], [])
        wait_for(lambda: done)
    finally:
        encoder.stop()
    assert errors == ["ValueError: bad frame"] and done == [1.0]
