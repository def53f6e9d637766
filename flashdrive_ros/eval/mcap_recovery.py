"""An MCAP file whose recording was cut off (power lost, the recorder killed): it ends inside
or after its data records, with no summary, footer or closing magic. Its complete records are
written again as an indexed file: the schemas, channels and chunks as they were (messages
outside a chunk gathered into uncompressed ones), each chunk followed by message indexes
built from its content, then a summary with the chunk indexes, so that a reader orders the
messages by log time however the recorder wrote them."""

from __future__ import annotations

import struct
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from rosbags.rosbag2 import ReaderError
from rosbags.rosbag2.storage_mcap import decompress

MAGIC = b"\x89MCAP0\r\n"
OP_HEADER = 0x01
OP_FOOTER = 0x02
OP_SCHEMA = 0x03
OP_CHANNEL = 0x04
OP_MESSAGE = 0x05
OP_CHUNK = 0x06
OP_MESSAGE_INDEX = 0x07
OP_CHUNK_INDEX = 0x08
OP_DATA_END = 0x0F
RECORD_PREFIX = 9  # op (1 byte) + record length (uint64)
MESSAGE_FIXED = 22  # channel id u16, sequence u32, log time u64, publish time u64
CHUNK_FIXED = 28  # start time u64, end time u64, uncompressed size u64, crc u32


@dataclass(frozen=True)
class Recovery:
    """A recovered copy of a cut-off MCAP file: `kept_bytes` of the original are complete
    records, the `dropped_bytes` after them are not; `messages` in the copy."""
    source: Path
    copy: Path
    kept_bytes: int
    dropped_bytes: int
    messages: int

    def note(self) -> str:
        return (f"{self.source.name}: the recording was cut off (no MCAP footer); read its "
                f"{self.messages} complete messages, dropped the last {self.dropped_bytes} "
                f"bytes")


def is_cut_off(path: Path) -> bool:
    """An MCAP file (opening magic) that does not end with the closing magic."""
    with path.open("rb") as f:
        if f.read(len(MAGIC)) != MAGIC:
            return False
        size = f.seek(0, 2)
        if size < 2 * len(MAGIC):
            return True
        f.seek(size - len(MAGIC))
        return f.read(len(MAGIC)) != MAGIC


def complete_records(f: BinaryIO, size: int) -> list[tuple[int, int, int]]:
    """(op, body offset, body length) of the top-level records after the opening magic that
    end inside the file, up to any data end or footer; empty when not even the header record
    is complete."""
    records = []
    offset = len(MAGIC)
    while offset + RECORD_PREFIX <= size:
        f.seek(offset)
        op, length = struct.unpack("<BQ", f.read(RECORD_PREFIX))
        end = offset + RECORD_PREFIX + length
        if end > size or op in (OP_DATA_END, OP_FOOTER) or (not records and op != OP_HEADER):
            break
        records.append((op, offset + RECORD_PREFIX, length))
        offset = end
    return records


def record(op: int, body: bytes) -> bytes:
    return struct.pack("<BQ", op, len(body)) + body


def chunk_content(data: bytes) -> tuple[list[tuple[int, int, int]], list[tuple[int, bytes]]]:
    """In a chunk's records `data`: (channel id, log time, offset in `data`) of every
    message, and (op, body) of every schema and channel record."""
    messages, definitions = [], []
    offset = 0
    while offset + RECORD_PREFIX <= len(data):
        op, length = struct.unpack_from("<BQ", data, offset)
        body_at = offset + RECORD_PREFIX
        if op == OP_MESSAGE and length >= MESSAGE_FIXED:
            channel, _, log_time = struct.unpack_from("<HIQ", data, body_at)
            messages.append((channel, log_time, offset))
        elif op in (OP_SCHEMA, OP_CHANNEL):
            definitions.append((op, data[body_at:body_at + length]))
        offset = body_at + length
    return messages, definitions


def loose_chunk(data: bytes) -> bytes:
    """An uncompressed chunk record body holding the message records `data`."""
    times = [t for _, t, _ in chunk_content(data)[0]]
    return (struct.pack("<QQQI", min(times), max(times), len(data), 0)
            + struct.pack("<I", 0) + struct.pack("<Q", len(data)) + data)


class IndexedWriter:
    """Writes the recovered file: data records, message indexes behind every chunk, the
    summary and the footer."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.summary: dict[bytes, None] = {}  # schema and channel records, ordered, once each
        self.chunk_indexes: list[bytes] = []
        self.messages = 0

    def copy(self, op: int, body: bytes) -> None:
        self.out.write(record(op, body))
        self.summarize(op, body)

    def summarize(self, op: int, body: bytes) -> None:
        """Schemas and channels, in the data section or inside chunks, go to the summary
        once each."""
        if op in (OP_SCHEMA, OP_CHANNEL):
            self.summary.setdefault(record(op, body))

    def chunk(self, body: bytes) -> None:
        start_time, end_time, size, crc = struct.unpack_from("<QQQI", body)
        (name_length,) = struct.unpack_from("<I", body, CHUNK_FIXED)
        compression = body[CHUNK_FIXED + 4:CHUNK_FIXED + 4 + name_length].decode()
        data_at = CHUNK_FIXED + 4 + name_length
        (compressed_size,) = struct.unpack_from("<Q", body, data_at)
        data = decompress(body[data_at + 8:data_at + 8 + compressed_size], compression, size,
                          crc)
        chunk_start = self.out.tell()
        self.out.write(record(OP_CHUNK, body))
        chunk_length = self.out.tell() - chunk_start
        per_channel: dict[int, list[tuple[int, int]]] = defaultdict(list)
        messages, definitions = chunk_content(data)
        for channel, log_time, offset in messages:
            per_channel[channel].append((log_time, offset))
        self.messages += len(messages)
        for op, definition in definitions:
            self.summarize(op, definition)
        index_offsets = {}
        for channel, entries in sorted(per_channel.items()):
            index_offsets[channel] = self.out.tell()
            pairs = b"".join(struct.pack("<QQ", t, o) for t, o in entries)
            self.out.write(record(OP_MESSAGE_INDEX, struct.pack("<HI", channel, len(pairs))
                                  + pairs))
        index_length = self.out.tell() - chunk_start - chunk_length
        offsets = b"".join(struct.pack("<HQ", c, o) for c, o in index_offsets.items())
        name = compression.encode()
        self.chunk_indexes.append(record(OP_CHUNK_INDEX, (
            struct.pack("<QQQQ", start_time, end_time, chunk_start, chunk_length)
            + struct.pack("<I", len(offsets)) + offsets
            + struct.pack("<Q", index_length) + struct.pack("<I", len(name)) + name
            + struct.pack("<QQ", compressed_size, size))))

    def close(self) -> None:
        self.out.write(record(OP_DATA_END, struct.pack("<I", 0)))
        summary_start = self.out.tell()
        for part in (*self.summary, *self.chunk_indexes):
            self.out.write(part)
        self.out.write(record(OP_FOOTER, struct.pack("<QQI", summary_start, 0, 0)) + MAGIC)


def recover(path: Path, copy: Path) -> Recovery:
    """Write `copy`: the complete records of the cut-off MCAP file `path`, indexed and
    closed. Raises ValueError when the file holds no complete header record or a complete
    chunk does not decompress to its stated size and checksum."""
    size = path.stat().st_size
    with path.open("rb") as f, copy.open("wb") as out:
        records = complete_records(f, size)
        if not records:
            raise ValueError(f"{path} was cut off before its first complete MCAP record")
        out.write(MAGIC)
        writer = IndexedWriter(out)
        loose = bytearray()
        for op, offset, length in records:
            f.seek(offset)
            body = f.read(length)
            if op == OP_MESSAGE:
                loose += record(op, body)
                continue
            if loose:
                writer.chunk(loose_chunk(bytes(loose)))
                loose.clear()
            if op == OP_CHUNK:
                try:
                    writer.chunk(body)
                except (ReaderError, struct.error) as exc:
                    raise ValueError(f"a complete chunk of {path} is damaged: {exc}") from None
            elif op in (OP_HEADER, OP_SCHEMA, OP_CHANNEL):
                writer.copy(op, body)
        if loose:
            writer.chunk(loose_chunk(bytes(loose)))
        writer.close()
    _, last_at, last_length = records[-1]
    kept = last_at + last_length
    return Recovery(path, copy, kept, size - kept, writer.messages)
