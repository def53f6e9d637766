"""Lost H.264 reference pictures found from the bitstream: every reference picture raises
frame_num by one (modulo MaxFrameNum) and an IDR sets it to 0, so a picture whose frame_num is
not the last reference picture's plus one follows a lost reference picture (a lost
non-reference picture is never referenced and changes nothing). Only the sequence and picture
parameter sets and the first fields of each slice header are read (Annex B byte stream)."""

from __future__ import annotations

from dataclasses import dataclass

START_CODE = b"\x00\x00\x01"
NAL_SLICE = 1
NAL_IDR = 5
NAL_SPS = 7
NAL_PPS = 8
HIGH_PROFILES = frozenset({100, 110, 122, 244, 44, 83, 86, 118, 128, 138, 139, 134, 135})


class BitstreamError(ValueError):
    """A parameter set or slice header ends early or holds an impossible value."""


def nal_units(data: bytes) -> list[bytes]:
    """The NAL units of an Annex B byte stream (start codes 00 00 01 / 00 00 00 01; the zero
    bytes before the next start code dropped)."""
    units = []
    start = data.find(START_CODE)
    while start >= 0:
        end = data.find(START_CODE, start + len(START_CODE))
        unit = (data[start + len(START_CODE):] if end < 0
                else data[start + len(START_CODE):end].rstrip(b"\x00"))
        if unit:
            units.append(unit)
        start = end
    return units


def rbsp(unit: bytes, header_bytes: int = 1) -> bytes:
    """The payload of a NAL unit without its header (1 byte in H.264, 2 in H.265) and
    emulation-prevention bytes."""
    return unit[header_bytes:].replace(b"\x00\x00\x03", b"\x00\x00")


class BitReader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.bit = 0

    def u(self, count: int) -> int:
        value = 0
        for _ in range(count):
            byte = self.bit >> 3
            if byte >= len(self.data):
                raise BitstreamError("header ends early")
            value = (value << 1) | ((self.data[byte] >> (7 - (self.bit & 7))) & 1)
            self.bit += 1
        return value

    def ue(self) -> int:
        zeros = 0
        while self.u(1) == 0:
            zeros += 1
            if zeros > 31:
                raise BitstreamError("exp-Golomb code longer than 32 bits")
        return (1 << zeros) - 1 + self.u(zeros)

    def se(self) -> int:
        code = self.ue()
        return (code + 1) // 2 if code % 2 else -(code // 2)


@dataclass(frozen=True)
class SequenceParameters:
    frame_num_bits: int
    separate_colour_plane: bool
    gaps_allowed: bool


def _skip_scaling_list(bits: BitReader, size: int) -> None:
    last = following = 8
    for _ in range(size):
        if following:
            following = (last + bits.se() + 256) % 256
        last = following or last


def parse_sps(payload: bytes) -> tuple[int, SequenceParameters]:
    """(seq_parameter_set_id, what slice headers need) of an SPS payload."""
    bits = BitReader(payload)
    profile = bits.u(8)
    bits.u(16)
    sps_id = bits.ue()
    separate = False
    if profile in HIGH_PROFILES:
        chroma_format = bits.ue()
        if chroma_format == 3:
            separate = bool(bits.u(1))
        bits.ue()
        bits.ue()
        bits.u(1)
        if bits.u(1):
            for index in range(12 if chroma_format == 3 else 8):
                if bits.u(1):
                    _skip_scaling_list(bits, 16 if index < 6 else 64)
    frame_num_bits = bits.ue() + 4
    poc_type = bits.ue()
    if poc_type == 0:
        bits.ue()
    elif poc_type == 1:
        bits.u(1)
        bits.se()
        bits.se()
        for _ in range(bits.ue()):
            bits.se()
    bits.ue()
    gaps = bool(bits.u(1))
    if not 4 <= frame_num_bits <= 16:
        raise BitstreamError(f"log2_max_frame_num {frame_num_bits} outside [4, 16]")
    return sps_id, SequenceParameters(frame_num_bits, separate, gaps)


class FrameNumbers:
    """`check(packet)` per packet in decoding order: why a reference picture was lost before
    it ("" when none was)."""

    def __init__(self) -> None:
        self._sps: dict[int, SequenceParameters] = {}
        self._pps: dict[int, int] = {}
        self._last_reference: int | None = None

    def restart(self) -> None:
        self._last_reference = None

    def check(self, data: bytes) -> str:
        problem = ""
        for unit in nal_units(data):
            kind, reference = unit[0] & 0x1F, (unit[0] >> 5) & 3
            try:
                if kind == NAL_SPS:
                    sps_id, sps = parse_sps(rbsp(unit))
                    self._sps[sps_id] = sps
                elif kind == NAL_PPS:
                    bits = BitReader(rbsp(unit))
                    pps_id = bits.ue()
                    self._pps[pps_id] = bits.ue()
                elif kind in (NAL_SLICE, NAL_IDR):
                    problem = self._slice(rbsp(unit), kind, reference) or problem
            except BitstreamError as exc:
                self._last_reference = None
                return f"unreadable H.264 header ({exc})"
        return problem

    def _slice(self, payload: bytes, kind: int, reference: int) -> str:
        bits = BitReader(payload)
        if bits.ue() != 0:
            return ""
        bits.ue()
        sps = self._sps.get(self._pps.get(bits.ue(), -1))
        if sps is None:
            self._last_reference = None
            return ""
        if sps.separate_colour_plane:
            bits.u(2)
        frame_num = bits.u(sps.frame_num_bits)
        last, self._last_reference = self._last_reference, (
            frame_num if reference else self._last_reference)
        if kind == NAL_IDR or last is None or sps.gaps_allowed:
            return ""
        expected = (last + 1) % (1 << sps.frame_num_bits)
        if frame_num != expected:
            return (f"reference pictures lost before this one (frame_num {frame_num}, "
                    f"expected {expected})")
        return ""
