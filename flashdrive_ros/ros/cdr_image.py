"""sensor_msgs/Image and CompressedImage read straight from their serialized CDR bytes (what a
raw subscription delivers): the header (stamp, frame_id) first, at its fixed offset, so a
frame can be dropped before anything else is read; then the remaining fields, with the pixel
data as a numpy view of the buffer (no copy). Plain CDR (XCDR1) in either byte order; other
encapsulations raise UnsupportedEncapsulation so that the caller can deserialize instead."""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from flashdrive_ros.ros.convert import ConversionError

ENCAPSULATION_BYTES = 4
BYTE_ORDERS = {b"\x00\x00": ">", b"\x00\x01": "<"}


class TruncatedMessage(ConversionError):
    reason = "truncated_message"


class UnsupportedEncapsulation(ConversionError):
    reason = "unsupported_encapsulation"


@dataclass(frozen=True)
class Stamp:
    sec: int
    nanosec: int


@dataclass(frozen=True)
class Header:
    stamp: Stamp
    frame_id: str


@dataclass(frozen=True)
class RawImage:
    """The fields of sensor_msgs/Image; data: uint8 [N] view of the serialized buffer."""

    header: Header
    height: int
    width: int
    encoding: str
    is_bigendian: int
    step: int
    data: np.ndarray


@dataclass(frozen=True)
class RawCompressedImage:
    """The fields of sensor_msgs/CompressedImage; data: uint8 [N] view of the buffer."""

    header: Header
    format: str
    data: np.ndarray


class CdrReader:
    """Sequential reader of CDR fields; alignment counts from the end of the 4-byte
    encapsulation header. Every read past the end raises TruncatedMessage."""

    def __init__(self, buffer) -> None:
        self.view = memoryview(buffer).cast("B")
        if len(self.view) < ENCAPSULATION_BYTES:
            raise TruncatedMessage(f"serialized message of {len(self.view)} bytes has no "
                                   f"encapsulation header")
        order = BYTE_ORDERS.get(bytes(self.view[:2]))
        if order is None:
            raise UnsupportedEncapsulation(f"CDR encapsulation "
                                           f"{bytes(self.view[:2]).hex()} is not plain CDR")
        self.order = order
        self.offset = ENCAPSULATION_BYTES

    def _need(self, count: int, what: str) -> None:
        if self.offset + count > len(self.view):
            raise TruncatedMessage(f"serialized message of {len(self.view)} bytes ends "
                                   f"inside {what} (needs {self.offset + count})")

    def _align(self, size: int) -> None:
        body = self.offset - ENCAPSULATION_BYTES
        self.offset += -body % size

    def uint32(self, what: str) -> int:
        self._align(4)
        self._need(4, what)
        value = struct.unpack_from(self.order + "I", self.view, self.offset)[0]
        self.offset += 4
        return value

    def int32(self, what: str) -> int:
        self._align(4)
        self._need(4, what)
        value = struct.unpack_from(self.order + "i", self.view, self.offset)[0]
        self.offset += 4
        return value

    def uint8(self, what: str) -> int:
        self._need(1, what)
        value = self.view[self.offset]
        self.offset += 1
        return value

    def string(self, what: str) -> str:
        length = self.uint32(what)
        self._need(length, what)
        raw = bytes(self.view[self.offset:self.offset + length])
        self.offset += length
        return raw.rstrip(b"\x00").decode("utf-8", errors="replace")

    def bytes_view(self, what: str) -> np.ndarray:
        """A uint8[] sequence as a view: uint8 [N]."""
        length = self.uint32(what)
        self._need(length, what)
        data = np.frombuffer(self.view, np.uint8, count=length, offset=self.offset)
        self.offset += length
        return data


def read_header(reader: CdrReader) -> Header:
    sec = reader.int32("header.stamp.sec")
    nanosec = reader.uint32("header.stamp.nanosec")
    return Header(Stamp(sec, nanosec), reader.string("header.frame_id"))


def image_header(buffer) -> tuple[Header, CdrReader]:
    """The std_msgs/Header of a serialized image message and the reader positioned after
    it."""
    reader = CdrReader(buffer)
    return read_header(reader), reader


def read_image(header: Header, reader: CdrReader) -> RawImage:
    """The sensor_msgs/Image fields after the header."""
    height = reader.uint32("height")
    width = reader.uint32("width")
    encoding = reader.string("encoding")
    is_bigendian = reader.uint8("is_bigendian")
    step = reader.uint32("step")
    return RawImage(header, height, width, encoding, is_bigendian, step,
                    reader.bytes_view("data"))


def read_compressed(header: Header, reader: CdrReader) -> RawCompressedImage:
    """The sensor_msgs/CompressedImage fields after the header."""
    fmt = reader.string("format")
    return RawCompressedImage(header, fmt, reader.bytes_view("data"))
