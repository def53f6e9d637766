"""Lost H.265 pictures found from the bitstream: an encoder without B-frames numbers its
pictures' order counts (POC) in one fixed step (0 at each IDR), so a picture whose POC is
not the last one's plus that step follows a lost picture (a frame the camera skipped before
encoding was never numbered). Only the sequence and picture parameter sets and the first
fields of each picture's first slice segment header are read (Annex B byte stream)."""

from __future__ import annotations

from dataclasses import dataclass

from flashdrive_ros.ros.h264_frame_num import BitReader, BitstreamError, nal_units, rbsp

NAL_IRAP = range(16, 24)
NAL_IDR = (19, 20)
NAL_VCL = range(0, 32)
NAL_SPS = 33
NAL_PPS = 34
PROFILE_BITS = 88


@dataclass(frozen=True)
class SequenceParameters:
    poc_lsb_bits: int
    separate_colour_plane: bool


@dataclass(frozen=True)
class PictureParameters:
    sps_id: int
    extra_slice_header_bits: int
    output_flag_present: bool


def parse_sps(payload: bytes) -> tuple[int, SequenceParameters]:
    bits = BitReader(payload)
    bits.u(4)
    sub_layers = bits.u(3)
    bits.u(1)
    bits.u(PROFILE_BITS)
    bits.u(8)
    present = [(bits.u(1), bits.u(1)) for _ in range(sub_layers)]
    if sub_layers:
        bits.u(2 * (8 - sub_layers))
    for profile, level in present:
        bits.u(PROFILE_BITS * profile + 8 * level)
    sps_id = bits.ue()
    separate = bits.ue() == 3 and bool(bits.u(1))
    bits.ue()
    bits.ue()
    if bits.u(1):
        for _ in range(4):
            bits.ue()
    bits.ue()
    bits.ue()
    poc_lsb_bits = bits.ue() + 4
    if not 4 <= poc_lsb_bits <= 16:
        raise BitstreamError(f"log2_max_pic_order_cnt_lsb {poc_lsb_bits} outside [4, 16]")
    return sps_id, SequenceParameters(poc_lsb_bits, separate)


def parse_pps(payload: bytes) -> tuple[int, PictureParameters]:
    bits = BitReader(payload)
    pps_id, sps_id = bits.ue(), bits.ue()
    bits.u(1)
    output_flag = bool(bits.u(1))
    return pps_id, PictureParameters(sps_id, bits.u(3), output_flag)


class PocSteps:
    """`check(packet)` per packet in decoding order: why a picture was lost before it (""
    when none was)."""

    def __init__(self) -> None:
        self._sps: dict[int, SequenceParameters] = {}
        self._pps: dict[int, PictureParameters] = {}
        self.restart()

    def restart(self) -> None:
        self._last_poc: int | None = None
        self._step: int | None = None

    def check(self, data: bytes) -> str:
        problem = ""
        for unit in nal_units(data):
            if len(unit) < 2:
                continue
            kind = (unit[0] >> 1) & 0x3F
            try:
                if kind == NAL_SPS:
                    sps_id, sps = parse_sps(rbsp(unit, 2))
                    self._sps[sps_id] = sps
                elif kind == NAL_PPS:
                    pps_id, pps = parse_pps(rbsp(unit, 2))
                    self._pps[pps_id] = pps
                elif kind in NAL_VCL:
                    problem = self._slice(rbsp(unit, 2), kind) or problem
            except BitstreamError as exc:
                self.restart()
                return f"unreadable H.265 header ({exc})"
        return problem

    def _slice(self, payload: bytes, kind: int) -> str:
        bits = BitReader(payload)
        if not bits.u(1):
            return ""
        if kind in NAL_IRAP:
            bits.u(1)
        pps = self._pps.get(bits.ue())
        sps = self._sps.get(pps.sps_id) if pps is not None else None
        if sps is None:
            self.restart()
            return ""
        if kind in NAL_IDR:
            self._last_poc = 0
            return ""
        bits.u(pps.extra_slice_header_bits)
        bits.ue()
        if pps.output_flag_present:
            bits.u(1)
        if sps.separate_colour_plane:
            bits.u(2)
        poc = bits.u(sps.poc_lsb_bits)
        last, self._last_poc = self._last_poc, poc
        if last is None:
            return ""
        modulus = 1 << sps.poc_lsb_bits
        step = (poc - last) % modulus
        if self._step is None:
            self._step = step
        if step != self._step:
            return (f"pictures lost before this one (order count {poc}, expected "
                    f"{(last + self._step) % modulus})")
        return ""
