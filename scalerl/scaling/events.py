"""TensorBoard event files read without TensorBoard, so that `pip install scalerl` reads them
without tensorboard, grpcio and protobuf (about 60 MB installed).

    read_scalars(path) -> {tag: [(step, wall time, value)]}   (in the file's order)

An event file is a TFRecord file (each record: its length as uint64, the length's masked CRC-32C,
the bytes, their masked CRC-32C) of `Event` protobuf messages. Of `Event` only the fields a
scalar needs are decoded (tensorboard/compat/proto/event.proto, summary.proto, tensor.proto):
wall_time (1), step (2), file_version (3), summary (5): value (1): tag (1), simple_value (2),
tensor (8); session_log (7): status (1). Read as TensorBoard's `EventAccumulator` reads scalars:
1. `simple_value` (what torch's and TRL's SummaryWriter write) is a scalar; so is a rank-0 float
   or double tensor (TF2's `tf.summary.scalar`, torch's `new_style=True`), which EventAccumulator
   files under tensors instead.
2. A `SessionLog.START` (a restarted writer, file_version >= 2) drops the events of every tag at
   its step and after, as EventAccumulator's purge of orphaned data does.
3. A record cut short at the end of the file (a writer still writing) ends the file quietly;
   a record whose checksum fails anywhere else is an error naming the file and the byte.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Iterator

from scalerl.errors import ScaleRLError

Scalars = dict[str, list[tuple[int, float, float]]]

_DT_FLOAT, _DT_DOUBLE = 1, 2  # tensorflow DataType
_SESSION_START = 1  # SessionLog.SessionStatus.START


def _crc_table() -> list[int]:
    table = []
    for n in range(256):
        for _ in range(8):
            n = (n >> 1) ^ 0x82F63B78 if n & 1 else n >> 1  # CRC-32C (Castagnoli), reflected
        table.append(n)
    return table


_CRC_TABLE = _crc_table()


def masked_crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path: Path, data: bytes) -> Iterator[bytes]:
    """The whole records of a TFRecord file's bytes."""
    pos = 0
    while pos + 12 <= len(data):
        length, length_crc = struct.unpack_from("<QI", data, pos)
        if not any(data[pos : pos + 12]):
            return  # space the writer has claimed and not yet filled
        if masked_crc32c(data[pos : pos + 8]) != length_crc:
            raise _damaged(path, pos)
        body_end = pos + 12 + length
        if body_end + 4 > len(data):
            return  # the last record, cut short: still being written
        body = data[pos + 12 : body_end]
        if masked_crc32c(body) != struct.unpack_from("<I", data, body_end)[0]:
            if body_end + 4 == len(data):
                return  # the last record, its bytes not all written yet
            raise _damaged(path, pos)
        yield body
        pos = body_end + 4


def _damaged(path: Path, pos: int) -> ScaleRLError:
    if pos == 0:
        return ScaleRLError(f"{path}: not a TensorBoard event file (no record at its start)")
    return ScaleRLError(
        f"{path}: damaged TensorBoard record at byte {pos} (checksum mismatch); the events after it cannot be read"
    )


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def fields(buf: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of a protobuf message: a varint as an int, every other
    wire type as its bytes."""
    pos, sizes = 0, {1: 8, 5: 4}
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire in sizes:
            value, pos = buf[pos : pos + sizes[wire]], pos + sizes[wire]
        elif wire == 2:
            size, pos = _varint(buf, pos)
            value, pos = buf[pos : pos + size], pos + size
        else:
            raise ValueError(f"protobuf wire type {wire} (groups) not expected in an Event")
        yield number, wire, value


def _tensor_scalar(buf: bytes) -> float | None:
    """The value of a rank-0 float/double TensorProto, else None."""
    dtype, rank, values = 0, 0, []
    for number, _wire, value in fields(buf):
        if number == 1:
            dtype = value
        elif number == 2:
            rank = sum(1 for n, _, _ in fields(value) if n == 2)  # TensorShapeProto.dim
        elif number in (4, 5, 6):  # tensor_content; float_val, double_val (packed or not)
            values.append((number, value))
    if rank or dtype not in (_DT_FLOAT, _DT_DOUBLE) or len(values) != 1:
        return None
    number, raw = values[0]
    fmt = "<d" if (dtype == _DT_DOUBLE if number == 4 else number == 6) else "<f"
    return struct.unpack(fmt, raw)[0] if len(raw) == struct.calcsize(fmt) else None


def _summary_values(buf: bytes) -> Iterator[tuple[str, float]]:
    for number, _, value in fields(buf):
        if number != 1:
            continue
        tag, scalar = None, None
        for n, wire, v in fields(value):
            if n == 1:
                tag = v.decode("utf-8", "replace")
            elif n == 2 and wire == 5:
                scalar = struct.unpack("<f", v)[0]
            elif n == 8:
                scalar = _tensor_scalar(v)
        if tag is not None and scalar is not None:
            yield tag, scalar


def _event(body: bytes) -> tuple[float, int, int | None, bytes | None, bytes | None]:
    """(wall time, step, file version, summary bytes, session status) of one Event."""
    wall, step, version, summary, status = 0.0, 0, None, None, None
    for number, _, value in fields(body):
        if number == 1:
            wall = struct.unpack("<d", value)[0]
        elif number == 2:
            step = value - (1 << 64) if value >= 1 << 63 else value
        elif number == 3 and value.startswith(b"brain.Event:"):
            version = int(float(value.split(b":")[1]))
        elif number == 5:
            summary = value
        elif number == 7:
            status = next((v for n, _, v in fields(value) if n == 1), 0)
    return wall, step, version, summary, status


def read_scalars(path: Path) -> Scalars:
    """tag -> [(step, wall time, value)] of one event file, in the file's order."""
    path = Path(path)
    scalars: Scalars = {}
    version = None
    try:
        for body in records(path, path.read_bytes()):
            wall, step, file_version, summary, status = _event(body)
            version = file_version if file_version is not None else version
            if status == _SESSION_START and (version or 0) >= 2:
                scalars = {tag: [e for e in events if e[0] < step] for tag, events in scalars.items()}
            for tag, value in _summary_values(summary) if summary else ():
                scalars.setdefault(tag, []).append((step, wall, value))
    except (ValueError, IndexError, struct.error, UnicodeDecodeError) as exc:
        raise ScaleRLError(f"{path}: not a TensorBoard event file ({exc})") from None
    return scalars
