"""The camera thread: messages handled in arrival order off the caller's thread, the oldest
dropped and counted when it falls behind, a failing message reported without stopping it."""

import threading

import pytest

from flashdrive_ros.ros.camera_worker import CameraWorker


def test_messages_are_handled_in_order_on_another_thread():
    seen, threads = [], set()

    def handle(index, msg):
        seen.append((index, msg))
        threads.add(threading.get_ident())

    worker = CameraWorker(handle, depth=100, on_drop=lambda *drop: pytest.fail(str(drop)),
                          on_error=lambda i, e: pytest.fail(str(e)))
    for k in range(50):
        worker.put(k % 4, k)
    assert worker.drain()
    worker.stop()
    assert seen == [(k % 4, k) for k in range(50)]
    assert threads and threading.get_ident() not in threads


def test_the_oldest_is_dropped_and_counted_when_the_thread_falls_behind():
    release, seen, drops = threading.Event(), [], []

    def handle(index, msg):
        release.wait(5)
        seen.append(msg)

    worker = CameraWorker(handle, depth=2, on_drop=lambda *drop: drops.append(drop),
                          on_error=lambda i, e: pytest.fail(str(e)))
    worker.put(0, "first")
    while not worker.busy:
        threading.Event().wait(0.001)
    for index, msg in enumerate(("a", "b", "c", "d")):
        worker.put(index, msg)
    release.set()
    assert worker.drain()
    worker.stop()
    assert seen == ["first", "c", "d"] and worker.dropped == 2
    assert drops == [(0, "a", 1), (1, "b", 2)]


def test_a_failing_message_is_reported_and_the_thread_goes_on():
    errors, seen = [], []

    def handle(index, msg):
        if msg == "bad":
            raise RuntimeError("cannot decode")
        seen.append(msg)

    worker = CameraWorker(handle, depth=10, on_drop=lambda *drop: pytest.fail(str(drop)),
                          on_error=lambda i, e: errors.append((i, str(e))))
    for msg in ("ok1", "bad", "ok2"):
        worker.put(3, msg)
    assert worker.drain()
    worker.stop()
    assert seen == ["ok1", "ok2"] and errors == [(3, "cannot decode")]
    with pytest.raises(ValueError):
        CameraWorker(lambda i, m: None, depth=0, on_drop=print, on_error=print)
