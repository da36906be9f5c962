"""The XOFs and the domain separation tag of draft-irtf-cfrg-vdaf-20, Sections 6.2, 6.2.1, 6.2.2 and 6.2.3.

TurboSHAKE128 (RFC 9861) comes from pycryptodome. Its object absorbs, then squeezes as a stream, so
successive ``next`` calls continue one output stream exactly as the spec's re-squeezing listing does.
AES-128 comes from ``cryptography``; XofFixedKeyAes128 hashes all the blocks it needs in one call.
"""

from __future__ import annotations

import functools
from typing import Protocol

import numpy as np
import numpy.typing as npt
from Crypto.Hash import TurboSHAKE128
from cryptography.hazmat.primitives.ciphers import Cipher, CipherContext, algorithms, modes

from privacy.vdaf.field import Field, Vec, next_power_of_2

# Section 2: "A global constant VERSION ... SHALL be 18" (the draft keeps the value of its last change).
VERSION = 18


def format_dst(algo_class: int, algo: int, usage: int) -> bytes:
    """VERSION, algorithm class, algorithm ID and usage, big-endian (Section 6.2.3)."""
    return bytes([VERSION, algo_class]) + algo.to_bytes(4, "big") + usage.to_bytes(2, "big")


class _Stream(Protocol):
    def next(self, length: int) -> bytes: ...


def _next_vec(xof: _Stream, field: type[Field], length: int) -> Vec:
    """The next ``length`` field elements by rejection sampling (Section 6.2).

    Reads the whole vector at once and tops up only for rejected draws: the stream is consumed in
    the same order as the spec's element-by-element loop, so the output is the same.
    """
    size, modulus = field.ENCODED_SIZE, field.MODULUS
    mask = next_power_of_2(modulus) - 1
    vec: Vec = []
    while len(vec) < length:
        chunk = xof.next((length - len(vec)) * size)
        for i in range(0, len(chunk), size):
            x = int.from_bytes(chunk[i : i + size], "little") & mask
            if x < modulus:
                vec.append(x)
    return vec


class XofTurboShake128:
    """TurboSHAKE128 with domain byte 1 over len(dst) || dst || len(seed) || seed || binder (Section 6.2.1)."""

    SEED_SIZE = 32

    def __init__(self, seed: bytes, dst: bytes, binder: bytes) -> None:
        if len(seed) > 255:
            raise ValueError("XofTurboShake128 seeds are at most 255 bytes")
        if len(dst) > 65535:
            raise ValueError("XofTurboShake128 domain separation tags are at most 65535 bytes")
        self._stream = TurboSHAKE128.new(domain=1)
        self._stream.update(len(dst).to_bytes(2, "little") + dst + bytes([len(seed)]) + seed + binder)

    def next(self, length: int) -> bytes:
        return self._stream.read(length) if length else b""

    def next_vec(self, field: type[Field], length: int) -> Vec:
        return _next_vec(self, field, length)

    @classmethod
    def derive_seed(cls, seed: bytes, dst: bytes, binder: bytes) -> bytes:
        return cls(seed, dst, binder).next(cls.SEED_SIZE)

    @classmethod
    def expand_into_vec(cls, field: type[Field], seed: bytes, dst: bytes, binder: bytes, length: int) -> Vec:
        return cls(seed, dst, binder).next_vec(field, length)


class XofFixedKeyAes128:
    """Fixed-key AES-128 in the hashing mode of [GKWWY20], Section 4.2 (draft-20, Section 6.2.2).

    TurboSHAKE128 with domain byte 2 over len(dst) || dst || binder derives the AES key once per
    (dst, binder); block i of the output stream is hash(seed xor le128(i)), where
    hash(x) = AES(key, sigma(x)) xor sigma(x) and sigma(lo || hi) = hi || (hi xor lo). The draft
    reserves this XOF for the IDPF of Poplar1, whose tree walk hashes many blocks under one key:
    ``hash_blocks`` takes them all in one AES call.
    """

    SEED_SIZE = 16
    BLOCK_SIZE = 16

    def __init__(self, seed: bytes, dst: bytes, binder: bytes) -> None:
        if len(seed) != self.SEED_SIZE:
            raise ValueError("XofFixedKeyAes128 seeds are 16 bytes")
        self._cipher = fixed_key_cipher(dst, binder)
        self._seed = np.frombuffer(seed, dtype=np.uint8)
        self._consumed = 0

    def next(self, length: int) -> bytes:
        first, end = self._consumed, self._consumed + length
        self._consumed = end
        if not length:
            return b""
        first_block, last_block = first // self.BLOCK_SIZE, (end - 1) // self.BLOCK_SIZE
        counters = counter_blocks(first_block, last_block - first_block + 1)
        stream = hash_blocks(self._cipher, counters ^ self._seed).tobytes()
        offset = first - first_block * self.BLOCK_SIZE
        return stream[offset : offset + length]

    def next_vec(self, field: type[Field], length: int) -> Vec:
        return _next_vec(self, field, length)

    @classmethod
    def derive_seed(cls, seed: bytes, dst: bytes, binder: bytes) -> bytes:
        return cls(seed, dst, binder).next(cls.SEED_SIZE)

    @classmethod
    def expand_into_vec(cls, field: type[Field], seed: bytes, dst: bytes, binder: bytes, length: int) -> Vec:
        return cls(seed, dst, binder).next_vec(field, length)


def fixed_key_cipher(dst: bytes, binder: bytes) -> CipherContext:
    """AES-128 under the key TurboSHAKE128(len(dst) || dst || binder, D=2, 16 bytes), in ECB mode.

    ECB is the blockcipher applied to each block on its own, which the hash needs; the key is public,
    only its dependence on the binder (a report's nonce) matters. The context is kept for every block
    hashed under that key: ECB carries no state from one whole-block update to the next.
    """
    if len(dst) > 65535:
        raise ValueError("XofFixedKeyAes128 domain separation tags are at most 65535 bytes")
    return Cipher(algorithms.AES128(_fixed_key(dst, binder)), modes.ECB()).encryptor()  # noqa: S305 - raw AES per block


# An aggregator derives the same few keys of a report at every level of a Poplar1 walk (the IDPF's
# extend and convert, under the report's nonce): kept for as many reports as a large collection
# holds, about 30 MB when full, so that a walk's levels derive each once.
@functools.lru_cache(maxsize=1 << 18)
def _fixed_key(dst: bytes, binder: bytes) -> bytes:
    derive = TurboSHAKE128.new(domain=2)
    derive.update(len(dst).to_bytes(2, "little") + dst + binder)
    return derive.read(16)


@functools.lru_cache(maxsize=64)
def counter_blocks(first: int, count: int) -> npt.NDArray[np.uint8]:
    """le128(i) for i in [first, first + count), one block per row (kept read-only in a small cache: the IDPF asks for the same few)."""
    counters = np.zeros((count, 16), dtype=np.uint8)
    counters[:, :8] = np.arange(first, first + count, dtype="<u8").view(np.uint8).reshape(count, 8)
    counters.flags.writeable = False
    return counters


def hash_blocks(cipher: CipherContext, blocks: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
    """AES(key, sigma(x)) xor sigma(x) for every 16-byte row x of ``blocks``, in one AES call.

    ``blocks`` may have any leading shape; the last axis is the block. sigma(lo || hi) = hi || (hi xor lo)
    is computed on the two little-endian 64-bit halves of each block.
    """
    halves = np.ascontiguousarray(blocks).view("<u8")
    sigma = np.empty_like(halves)
    sigma[..., 0] = halves[..., 1]
    sigma[..., 1] = halves[..., 1] ^ halves[..., 0]
    encrypted = np.frombuffer(cipher.update(sigma.tobytes()), dtype="<u8").reshape(sigma.shape)
    return (encrypted ^ sigma).view(np.uint8)
