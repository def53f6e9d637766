"""Recordings that were never closed: MCAP files cut off without their footer (power lost,
the recorder killed) and storage files without metadata.yaml, read as far as they are
complete, with a note saying so."""

import shutil
import struct

import pytest
from helpers.bags import TYPESTORE, write_drive_bag
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.rosbag2.storage_mcap import McapReader

from flashdrive_ros.eval.bag import BagReader, ImageRecord, OdometryRecord
from flashdrive_ros.eval.bag_source import bag_source
from flashdrive_ros.eval.errors import CorruptBag
from flashdrive_ros.eval.mcap_recovery import (
    MAGIC,
    OP_CHUNK,
    OP_HEADER,
    OP_MESSAGE,
    chunk_content,
    complete_records,
    is_cut_off,
    loose_chunk,
    record,
    recover,
)
from flashdrive_ros.eval.topics import TopicMapping


def content(record) -> tuple:
    """A record as comparable values."""
    if isinstance(record, ImageRecord):
        return ("image", record.camera, record.stamp, record.rgb.tobytes())
    if isinstance(record, OdometryRecord):
        return ("odometry", record.stamp, record.position.tobytes(),
                record.quaternion.tobytes(), record.linear_velocity.tobytes())
    return ("label", record.stamp, sorted(record.values.items()))


def records_of(path):
    with BagReader(path, TopicMapping()) as bag:
        return [content(r) for r in bag.records()], bag.input_notes()


@pytest.fixture(scope="module")
def closed_bag(tmp_path_factory):
    """Raw 64x48 images: about 3.6 MB of messages, so several 1 MiB chunks."""
    return write_drive_bag(tmp_path_factory.mktemp("closed") / "bag", seconds=10.0, raw=True)


def cut_copy(bag, out, fraction, keep_metadata):
    out.mkdir()
    storage = next(bag.glob("*.mcap"))
    shutil.copy(storage, out / storage.name)
    if keep_metadata:
        shutil.copy(bag / "metadata.yaml", out / "metadata.yaml")
    with open(out / storage.name, "r+b") as f:
        f.truncate(int(storage.stat().st_size * fraction))
    return out


@pytest.mark.parametrize("keep_metadata", [True, False])
def test_a_cut_off_mcap_reads_its_complete_chunks_in_order(tmp_path, closed_bag,
                                                           keep_metadata):
    full, _ = records_of(closed_bag)
    cut = cut_copy(closed_bag, tmp_path / "cut", 0.7, keep_metadata)
    records, notes = records_of(cut)
    assert 0 < len(records) < len(full)
    assert records == full[:len(records)]
    assert {"image", "odometry", "label"} == {r[0] for r in records}
    cut_note = "bag.mcap: the recording was cut off (no MCAP footer); read its "
    assert any(cut_note in n for n in notes)
    assert any("no metadata.yaml" in n for n in notes) is not keep_metadata
    assert not list(cut.glob("*recovered*")) and is_cut_off(next(cut.glob("*.mcap")))


def test_the_recovered_copy_is_removed_on_close(tmp_path, closed_bag):
    cut = cut_copy(closed_bag, tmp_path / "cut", 0.7, keep_metadata=False)
    with BagReader(cut, TopicMapping()) as bag:
        copy = bag.source.reader_paths()[0]
        assert copy.is_file() and not is_cut_off(copy)
    assert not copy.exists()


def test_recovery_indexes_every_complete_message(tmp_path, closed_bag):
    storage = next(closed_bag.glob("*.mcap"))
    assert not is_cut_off(storage)
    cut = cut_copy(closed_bag, tmp_path / "cut", 0.5, keep_metadata=False) / storage.name
    with cut.open("rb") as f:
        records = complete_records(f, cut.stat().st_size)
    chunks = [r for r in records if r[0] == OP_CHUNK]
    assert records[0][0] == OP_HEADER and len(chunks) >= 1
    recovery = recover(cut, tmp_path / "copy.mcap")
    data = recovery.copy.read_bytes()
    assert data.startswith(MAGIC) and data.endswith(MAGIC) and not is_cut_off(recovery.copy)
    end = records[-1][1] + records[-1][2]
    assert recovery.kept_bytes == end and recovery.dropped_bytes == cut.stat().st_size - end
    reader = McapReader(recovery.copy)
    reader.open()
    try:
        assert len(reader.chunks) == len(chunks)
        assert reader.metadata.message_count == recovery.messages > 0
        times = [t for _, t, _ in reader.messages(reader.connections)]
    finally:
        reader.close()
    assert len(times) == recovery.messages and times == sorted(times)


def test_a_cut_off_recording_written_out_of_log_time_order_reads_in_order(tmp_path):
    """Log times unsorted across topics, as a recorder with per-topic transport delays
    writes them; loose messages outside chunks as well as chunked ones."""
    closed = tmp_path / "closed"
    odometry = "/odometry"
    typ = TYPESTORE.types["std_msgs/msg/String"]
    events = [(1_000_000_000 + 10_000_000 * k + (30_000_000 if k % 3 == 0 else 0), k)
              for k in range(400)]
    with Writer(closed, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        conn = writer.add_connection(odometry, "std_msgs/msg/String", typestore=TYPESTORE)
        for t, k in events:
            writer.write(conn, t, TYPESTORE.serialize_cdr(typ(data="x" * 5000 + str(k)),
                                                          "std_msgs/msg/String"))
    storage = next(closed.glob("*.mcap"))
    cut = tmp_path / "cut.mcap"
    cut.write_bytes(storage.read_bytes()[:int(storage.stat().st_size * 0.8)])
    recovery = recover(cut, tmp_path / "copy.mcap")
    reader = McapReader(recovery.copy)
    reader.open()
    try:
        got = [t for _, t, _ in reader.messages(reader.connections)]
    finally:
        reader.close()
    assert 0 < len(got) < len(events) and got == sorted(got)
    assert set(got) <= {t for t, _ in events}


def test_messages_outside_chunks_are_gathered_into_one(tmp_path):
    lines = [record(OP_MESSAGE, struct.pack("<HIQQ", 1, k, t, t) + b"abc")
             for k, t in enumerate([30, 10, 20])]
    body = loose_chunk(b"".join(lines))
    start, end, size = struct.unpack_from("<QQQ", body)
    assert (start, end, size) == (10, 30, sum(len(x) for x in lines))
    assert [t for _, t, _ in chunk_content(b"".join(lines))[0]] == [30, 10, 20]


def test_an_mcap_cut_off_in_its_header_is_named(tmp_path):
    path = tmp_path / "bag.mcap"
    path.write_bytes(MAGIC + b"\x01\x40")
    with pytest.raises(CorruptBag, match="cut off before its first complete MCAP record"):
        with BagReader(path, TopicMapping()):
            pass


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_storage_files_without_metadata_are_read_directly(tmp_path, storage):
    bag = write_drive_bag(tmp_path / "bag", seconds=0.5, storage=storage)
    full, _ = records_of(bag)
    (bag / "metadata.yaml").unlink()
    records, notes = records_of(bag)
    assert records == full
    assert notes[0].endswith("no metadata.yaml (the recording was not closed); read its 1 "
                             "storage file(s) directly")
    single, _ = records_of(next(p for p in bag.iterdir()))
    assert single == full


def test_split_files_without_metadata_are_read_in_recording_order(tmp_path):
    bag = write_drive_bag(tmp_path / "bag", seconds=1.0)
    full, _ = records_of(bag)
    with BagReader(bag, TopicMapping()) as reader:
        messages = [(c, t, bytes(raw)) for c, t, raw in reader.reader.messages()]
    split = tmp_path / "split"
    split.mkdir()
    parts = {2: messages[:len(messages) // 3], 10: messages[len(messages) // 3:]}
    for k, part in parts.items():
        part_dir = tmp_path / f"part{k}"
        with Writer(part_dir, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
            conns = {}
            for conn, t, raw in part:
                if conn.topic not in conns:
                    conns[conn.topic] = writer.add_connection(conn.topic, conn.msgtype,
                                                              typestore=TYPESTORE)
                writer.write(conns[conn.topic], t, raw)
        shutil.copy(next(part_dir.glob("*.mcap")), split / f"bag_{k}.mcap")
    assert [p.name for p in bag_source(split).files] == ["bag_2.mcap", "bag_10.mcap"]
    records, notes = records_of(split)
    assert sorted(records, key=repr) == sorted(full, key=repr)
    assert "read its 2 storage file(s) directly" in notes[0]


def test_a_path_that_is_no_bag_is_named(tmp_path):
    other = tmp_path / "notes.txt"
    other.write_text("x")
    with pytest.raises(CorruptBag, match="neither a rosbag2 directory nor a .mcap or .db3"):
        bag_source(other)


def test_a_chunk_failing_its_checksum_is_a_corrupt_bag(tmp_path):
    bag = write_drive_bag(tmp_path / "bag", seconds=0.5)
    storage = next(bag.glob("*.mcap"))
    with storage.open("rb") as f:
        _, body_at, _ = next(r for r in complete_records(f, storage.stat().st_size)
                             if r[0] == OP_CHUNK)
    data = bytearray(storage.read_bytes())
    struct.pack_into("<I", data, body_at + 24, 12345)  # the chunk's uncompressed crc
    storage.write_bytes(bytes(data))
    with pytest.raises(CorruptBag, match="unreadable past some point: Chunk checksum mismatch"):
        records_of(bag)
