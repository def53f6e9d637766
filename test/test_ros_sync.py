import pytest
from builtin_interfaces.msg import Time
from hypothesis import given, settings
from hypothesis import strategies as st
from sensor_msgs.msg import CompressedImage
from std_msgs.msg import String

from flashdrive_ros.ros.sync import ApproximateTimeSynchronizer, stamp_ns_of

MS = 1_000_000


def feed(sync, events):
    """events: (input index, stamp in ms, label); returns the emitted label tuples."""
    emitted = []
    for index, stamp_ms, label in events:
        out = sync.add(index, label, stamp_ns=stamp_ms * MS)
        if out is not None:
            emitted.append(out)
    return emitted


def test_pairs_nearest_first_and_late_arrival_still_matches():
    sync = ApproximateTimeSynchronizer(2, queue_size=10, slop_s=0.1)
    emitted = feed(sync, [
        (0, 1000, "a1000"),
        (1, 1050, "b1050"),
        (0, 2000, "a2000"),
        (0, 2100, "a2100"),
        (1, 2080, "b2080"),
        (1, 1950, "b1950"),
    ])
    assert emitted == [("a1000", "b1050"), ("a2100", "b2080"), ("a2000", "b1950")]
    assert all(not q for q in sync.queues)


def test_spread_equal_to_slop_is_rejected():
    sync = ApproximateTimeSynchronizer(2, queue_size=10, slop_s=0.1)
    assert feed(sync, [(0, 1000, "a"), (1, 1100, "b")]) == []
    assert feed(sync, [(0, 1150, "a2")]) == [("a2", "b")]
    assert list(sync.queues[0]) == [1000 * MS]


def test_queue_size_drops_oldest():
    sync = ApproximateTimeSynchronizer(2, queue_size=2, slop_s=0.1)
    emitted = feed(sync, [
        (0, 1000, "a1000"),
        (0, 1050, "a1050"),
        (0, 1300, "a1300"),
        (1, 1000, "b1000"),
    ])
    assert emitted == [("a1050", "b1000")]
    assert list(sync.queues[0]) == [1300 * MS]


def test_new_message_evicted_by_its_own_queue_is_not_emitted():
    sync = ApproximateTimeSynchronizer(2, queue_size=1, slop_s=0.1)
    emitted = feed(sync, [
        (1, 500, "b500"),
        (0, 2000, "a2000"),
        (0, 510, "a510"),
    ])
    assert emitted == []
    assert list(sync.queues[0]) == [2000 * MS]


def test_three_inputs_product_order_skips_wide_set():
    sync = ApproximateTimeSynchronizer(3, queue_size=10, slop_s=0.1)
    emitted = feed(sync, [
        (0, 100, "a100"),
        (0, 10, "a10"),
        (1, 0, "b0"),
        (2, 80, "c80"),
    ])
    assert emitted == [("a10", "b0", "c80")]
    assert list(sync.queues[0]) == [100 * MS]


def test_repeated_stamp_replaces_message_and_callbacks_get_input_order():
    sync = ApproximateTimeSynchronizer(2, queue_size=10, slop_s=0.05)
    got = []
    sync.register_callback(lambda *msgs: got.append(msgs))
    feed(sync, [(1, 1000, "first"), (1, 1000, "second"), (0, 1010, "a")])
    assert got == [("a", "second")]


def test_header_stamps_and_headerless_drop():
    sync = ApproximateTimeSynchronizer(2, queue_size=10, slop_s=0.05)
    a = CompressedImage()
    a.header.stamp = Time(sec=3, nanosec=900_000_000)
    b = CompressedImage()
    b.header.stamp = Time(sec=4, nanosec=0)
    assert stamp_ns_of(b) == 4_000_000_000
    assert sync.add(0, String(data="no header")) is None
    assert sync.headerless_dropped == 1
    assert sync.add(0, a) is None
    assert sync.add(1, b) is None
    b.header.stamp = Time(sec=3, nanosec=940_000_000)
    assert sync.add(1, b) == (a, b)


@pytest.mark.parametrize("kwargs", [
    dict(num_inputs=0, queue_size=1, slop_s=0.1),
    dict(num_inputs=2, queue_size=0, slop_s=0.1),
    dict(num_inputs=2, queue_size=1, slop_s=0.0),
    dict(num_inputs=2, queue_size=1, slop_s=float("nan")),
])
def test_invalid_configuration(kwargs):
    with pytest.raises(ValueError):
        ApproximateTimeSynchronizer(**kwargs)


def test_bad_index():
    with pytest.raises(IndexError):
        ApproximateTimeSynchronizer(2, 1, 0.1).add(2, "x", stamp_ns=0)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 400)), max_size=60),
       st.integers(1, 5))
def test_emitted_sets_are_within_slop_and_unique(events, queue_size):
    sync = ApproximateTimeSynchronizer(3, queue_size=queue_size, slop_s=0.03)
    seen = set()
    for serial, (index, stamp_ms) in enumerate(events):
        out = sync.add(index, (index, stamp_ms, serial), stamp_ns=stamp_ms * MS)
        assert all(len(q) <= queue_size for q in sync.queues)
        if out is None:
            continue
        assert [m[0] for m in out] == [0, 1, 2]
        stamps = [m[1] for m in out]
        assert max(stamps) - min(stamps) < 30
        assert out[index][2] == serial
        assert not seen.intersection(out)
        seen.update(out)
