"""TurboSHAKE128 (RFC 9861) over many messages at once: Keccak-p[1600, 12] on numpy uint64 lanes, one column per message.

Poplar1's IDPF hashes every node of its last level with XofTurboShake128 (draft-20, Section 8.3.4),
thousands of short messages per report. pycryptodome spends several microseconds of fixed cost per
message (object creation, absorb, squeeze through its C binding); here each step of the permutation
is one numpy operation over all the messages, which costs a small fraction of that per message. The
round constants and rotation offsets are computed from their definitions in FIPS 202, Section 3.2,
rather than copied as tables, and the unit tests hold the output to pycryptodome's.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

RATE = 168  # bytes: TurboSHAKE128's capacity is 256 bits
ROUNDS = 12
_CHUNK = 1024  # messages permuted together: the state's arrays then stay in the core's cache


def _rc_bit(t: int) -> int:
    """rc(t) of FIPS 202, Algorithm 5: the output of an 8-bit LFSR."""
    if t % 255 == 0:
        return 1
    r = 0x01  # R[0] is bit 0
    for _ in range(t % 255):
        r <<= 1
        if r & 0x100:
            r ^= 0x171  # R[0], R[4], R[5], R[6] ^= R[8]; R[8] dropped
    return r & 1


def _round_constant(ir: int) -> int:
    return sum(_rc_bit(j + 7 * ir) << (2**j - 1) for j in range(7))


def _rho_offsets() -> list[int]:
    """The rotation of lane x + 5y (FIPS 202, Algorithm 2)."""
    offsets = [0] * 25
    x, y = 1, 0
    for t in range(24):
        offsets[x + 5 * y] = ((t + 1) * (t + 2) // 2) % 64
        x, y = y, (2 * x + 3 * y) % 5
    return offsets


# Keccak-p[1600, 12] runs the last twelve rounds of Keccak-f[1600]: ir from 12 to 23.
_RC = [np.uint64(_round_constant(ir)) for ir in range(24 - ROUNDS, 24)]
_ROT = np.array(_rho_offsets(), dtype=np.uint64)[:, None]
# pi: the new lane x + 5y is the old lane (x + 3y) mod 5 + 5x.
_PI = np.array([(x + 3 * y) % 5 + 5 * x for y in range(5) for x in range(5)], dtype=np.intp)
_ROT_PI = _ROT[_PI]  # pi then rho: the rotation each gathered lane takes
_BACK_PI = np.uint64(64) - _ROT_PI  # a shift by 64 gives 0 in numpy, so lane 0's rotation by 0 holds
# theta reads the column parities x - 1 and x + 1.
_PREV_COLUMN = np.array([4, 0, 1, 2, 3], dtype=np.intp)
_NEXT_COLUMN = np.array([1, 2, 3, 4, 0], dtype=np.intp)
_ONE, _63 = np.uint64(1), np.uint64(63)


def permute(lanes: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """Keccak-p[1600, 12] of each column of ``lanes`` (25 × n, lane x + 5y in row x + 5y); ``lanes`` is overwritten.

    In-place operations where numpy allows: the state is a few hundred kilobytes, and every pass
    over it that allocates costs as much as the arithmetic. chi goes column by column (x), on slices
    rather than gathered copies of the state.
    """
    a, out = lanes, np.empty_like(lanes)
    for rc in _RC:
        rows = a.reshape(5, 5, -1)  # [y, x]
        c = rows[0] ^ rows[1]
        c ^= rows[2]
        c ^= rows[3]
        c ^= rows[4]
        right = c[_NEXT_COLUMN]
        d = c[_PREV_COLUMN]
        d ^= right << _ONE
        d ^= right >> _63
        rows ^= d
        gathered = a[_PI]
        b = gathered << _ROT_PI
        gathered >>= _BACK_PI
        b |= gathered
        b_rows, out_rows = b.reshape(5, 5, -1), out.reshape(5, 5, -1)
        for x in range(5):
            chi = ~b_rows[:, (x + 1) % 5]
            chi &= b_rows[:, (x + 2) % 5]
            np.bitwise_xor(b_rows[:, x], chi, out=out_rows[:, x])
        out[0] ^= rc
        a, out = out, a
    return a


def turboshake128(messages: npt.NDArray[np.uint8], domain: int, length: int) -> npt.NDArray[np.uint8]:
    """TurboSHAKE128(M, D, length) of each row M of ``messages`` (all of one length), one row of output each."""
    count, size = messages.shape
    blocks = size // RATE + 1
    padded = np.zeros((count, blocks * RATE), dtype=np.uint8)
    padded[:, :size] = messages
    padded[:, size] = domain
    padded[:, -1] ^= 0x80
    out = np.empty((count, length), dtype=np.uint8)
    for start in range(0, count, _CHUNK):
        rows = padded[start : start + _CHUNK]
        state = np.zeros((25, len(rows)), dtype=np.uint64)
        for block in range(blocks):
            chunk = np.ascontiguousarray(rows[:, block * RATE : (block + 1) * RATE]).view("<u8")
            state[: RATE // 8] ^= chunk.T
            state = permute(state)
        squeezed = []
        for taken in range(0, length, RATE):
            if taken:
                state = permute(state)
            squeezed.append(np.ascontiguousarray(state[: RATE // 8].T).astype("<u8").view(np.uint8))
        out[start : start + _CHUNK] = np.concatenate(squeezed, axis=1)[:, :length]
    return out
