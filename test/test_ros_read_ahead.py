"""ReadAhead: order, the byte bound, errors and early close (threads only, no DDS)."""

import threading
import time

import pytest

from flashdrive_ros.ros.harness.read_ahead import ReadAhead


def test_items_come_in_order_and_the_reader_stays_within_the_bound():
    produced = []

    def source():
        for i in range(200):
            produced.append(i)
            yield bytes(10 + i % 7)

    consumed = []
    with ReadAhead(source(), size=len, max_bytes=64) as items:
        for item in items:
            time.sleep(0.0005)
            assert len(produced) - len(consumed) <= 64 // 10 + 2
            consumed.append(item)
    assert consumed == [bytes(10 + i % 7) for i in range(200)]
    assert 0 < items.peak_bytes <= 64


def test_an_item_larger_than_the_bound_still_passes_alone():
    with ReadAhead(iter([b"x" * 100, b"y" * 100, b"z"]), size=len, max_bytes=10) as items:
        assert list(items) == [b"x" * 100, b"y" * 100, b"z"]
    assert items.peak_bytes == 100


def test_an_error_of_the_source_reaches_the_consumer_after_the_items_before_it():
    def source():
        yield b"a"
        yield b"b"
        raise OSError("bag chunk unreadable")

    got = []
    with ReadAhead(source(), size=len, max_bytes=1 << 20) as items:
        with pytest.raises(OSError, match="bag chunk unreadable"):
            for item in items:
                got.append(item)
    assert got == [b"a", b"b"]


def test_close_stops_a_reader_waiting_on_a_full_buffer():
    produced = []

    def source():
        for i in range(10_000):
            produced.append(i)
            yield b"0123456789"

    items = ReadAhead(source(), size=len, max_bytes=50)
    first = next(iter(items))
    items.close()
    assert first == b"0123456789" and len(produced) < 20
    assert not any(t.name == "read_ahead" and t.is_alive() for t in threading.enumerate())
