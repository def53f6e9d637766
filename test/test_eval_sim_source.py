import numpy as np
import pytest

from flashdrive_ros.eval.bag import BagReader
from flashdrive_ros.eval.records import ImageRecord, LabelRecord, OdometryRecord
from flashdrive_ros.eval.sim_source import SimDriveSource
from flashdrive_ros.eval.topics import TopicMapping
from flashdrive_ros.sim.bag import write_bag

SEED, SECONDS = 1000003, 2.0


def grouped(records):
    """Records keyed by (stamp, kind, camera): log-time ties may come in any order."""
    out = {}
    for record in records:
        camera = record.camera if isinstance(record, ImageRecord) else -1
        out[(record.stamp, type(record).__name__, camera)] = record
    return out


@pytest.fixture(scope="module")
def bag(tmp_path_factory):
    path = tmp_path_factory.mktemp("bag") / "drive"
    write_bag(path, SECONDS, SEED, workers=1)
    return path


def test_sim_source_gives_the_records_of_the_bag(bag):
    with BagReader(bag, TopicMapping()) as reader:
        expected = list(reader.records())
        times = (reader.start_time, reader.end_time)
        odometry, labels = reader.odometry(), reader.labels()
    with SimDriveSource(SEED, SECONDS) as source:
        got = list(source.records())
        assert (source.start_time, source.end_time) == times
        assert len(source.odometry()) == len(odometry)
        assert [r.values for r in source.labels()] == [r.values for r in labels]
    want, have = grouped(expected), grouped(got)
    assert len(expected) == len(got) and want.keys() == have.keys()
    for key, record in want.items():
        other = have[key]
        if isinstance(record, ImageRecord):
            assert record.error is None and other.error is None
            np.testing.assert_array_equal(other.rgb, record.rgb)
        elif isinstance(record, OdometryRecord):
            for name in ("position", "quaternion", "linear_velocity"):
                np.testing.assert_array_equal(getattr(other, name), getattr(record, name))
        else:
            assert isinstance(other, LabelRecord) and other.values == record.values


def test_sim_source_without_labels_topic_has_no_labels():
    source = SimDriveSource(SEED, 0.5, topics=TopicMapping(labels=None))
    assert source.labels() == []
    assert not any(isinstance(r, LabelRecord) for r in source.records())
