"""TMA descriptor requests: what the C++ runtime encodes (cuTensorMapEncodeTiled) into a kernel's tensor-map
parameter slot. Packed as fixed 120-byte records so a launch passes any number of 1-5-D maps as one bytes
object (layout mirrored by `TmaRequest` in host/csrc/runtime.cpp; a CPU test pins the size)."""

from __future__ import annotations

import struct

# CUtensorMapDataType values from cuda.h (the ones our kernels read)
DTYPE = {
    "uint8": 0,
    "uint16": 1,
    "uint32": 2,
    "int32": 3,
    "uint64": 4,
    "int64": 5,
    "float16": 6,
    "float32": 7,
    "float64": 8,
    "bfloat16": 9,
}
SWIZZLES = (0, 32, 64, 128)
MAX_RANK = 5

# param offset, data type, rank, swizzle bytes, address, dims[5] (elements, innermost first),
# strides[4] (bytes, of dims 1..rank-1), box[5] (elements), reserved
RECORD = struct.Struct("<IIIIQ5Q4Q5II")
assert RECORD.size == 120


def tma_request(
    offset: int,
    dtype: str,
    address: int,
    dims: tuple[int, ...],
    strides: tuple[int, ...],
    box: tuple[int, ...],
    swizzle: int,
) -> bytes:
    """One descriptor request: `dims`/`box` innermost first, `strides` in bytes for dims 1.. (rank - 1 values)."""
    rank = len(dims)
    if not 1 <= rank <= MAX_RANK or len(box) != rank or len(strides) != rank - 1:
        raise ValueError(
            f"a rank-{rank} tensor map needs {rank} box sizes and {rank - 1} strides, got {len(box)} and {len(strides)}"
        )
    if swizzle not in SWIZZLES:
        raise ValueError(f"swizzle must be one of {SWIZZLES} bytes, got {swizzle}")
    pad = MAX_RANK - rank
    return RECORD.pack(
        offset, DTYPE[dtype], rank, swizzle, address, *dims, *(0,) * pad, *strides, *(0,) * pad, *box, *(0,) * pad, 0
    )


_PAIR = struct.Struct("<" + RECORD.format.lstrip("<") * 2)


def tma_2d_pair(
    off_a: int,
    code_a: int,
    ptr_a: int,
    inner_a: int,
    outer_a: int,
    stride_a: int,
    box_inner_a: int,
    box_outer_a: int,
    swizzle_a: int,
    off_b: int,
    code_b: int,
    ptr_b: int,
    inner_b: int,
    outer_b: int,
    stride_b: int,
    box_inner_b: int,
    box_outer_b: int,
    swizzle_b: int,
) -> bytes:
    """Two 2-D records in one pack (the two GEMM operands): half the Python calls of two tma_2d."""
    return _PAIR.pack(
        off_a,
        code_a,
        2,
        swizzle_a,
        ptr_a,
        inner_a,
        outer_a,
        0,
        0,
        0,
        stride_a,
        0,
        0,
        0,
        box_inner_a,
        box_outer_a,
        0,
        0,
        0,
        0,
        off_b,
        code_b,
        2,
        swizzle_b,
        ptr_b,
        inner_b,
        outer_b,
        0,
        0,
        0,
        stride_b,
        0,
        0,
        0,
        box_inner_b,
        box_outer_b,
        0,
        0,
        0,
        0,
    )


def tma_2d(
    offset: int,
    dtype_code: int,
    address: int,
    inner: int,
    outer: int,
    stride: int,
    box_inner: int,
    box_outer: int,
    swizzle: int,
) -> bytes:
    """The hot-path 2-D form (no checks: the family module has validated the operand)."""
    return RECORD.pack(
        offset,
        dtype_code,
        2,
        swizzle,
        address,
        inner,
        outer,
        0,
        0,
        0,
        stride,
        0,
        0,
        0,
        box_inner,
        box_outer,
        0,
        0,
        0,
        0,
    )


_ADDRESS = struct.Struct("<Q")
_ADDRESS_AT = 16  # the address field's byte offset in a record (after four uint32)


def with_addresses(requests: bytes, *addresses: int) -> bytes:
    """`requests` (records built for one call) with each record's address replaced, in order: a cached call's
    descriptors for this call's tensors, every other field (dims, strides, boxes) as the signature fixed them."""
    if len(requests) != len(addresses) * RECORD.size:
        raise ValueError(f"{len(requests) // RECORD.size} tensor-map records, {len(addresses)} addresses")
    buf = bytearray(requests)
    for i, addr in enumerate(addresses):
        _ADDRESS.pack_into(buf, i * RECORD.size + _ADDRESS_AT, addr)
    return bytes(buf)
