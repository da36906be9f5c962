"""XofTurboShake128 and the domain separation tag of draft-irtf-cfrg-vdaf-20, Sections 6.2, 6.2.1 and 6.2.3.

TurboSHAKE128 (RFC 9861) comes from pycryptodome. Its object absorbs, then squeezes as a stream, so
successive ``next`` calls continue one output stream exactly as the spec's re-squeezing listing does.
"""

from __future__ import annotations

from Crypto.Hash import TurboSHAKE128

from privacy.vdaf.field import Field, Vec, next_power_of_2

# Section 2: "A global constant VERSION ... SHALL be 18" (the draft keeps the value of its last change).
VERSION = 18


def format_dst(algo_class: int, algo: int, usage: int) -> bytes:
    """VERSION, algorithm class, algorithm ID and usage, big-endian (Section 6.2.3)."""
    return bytes([VERSION, algo_class]) + algo.to_bytes(4, "big") + usage.to_bytes(2, "big")


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
        """The next ``length`` field elements by rejection sampling (Section 6.2).

        Reads the whole vector at once and tops up only for rejected draws: the stream is consumed in
        the same order as the spec's element-by-element loop, so the output is the same.
        """
        size, modulus = field.ENCODED_SIZE, field.MODULUS
        mask = next_power_of_2(modulus) - 1
        vec: Vec = []
        while len(vec) < length:
            chunk = self.next((length - len(vec)) * size)
            for i in range(0, len(chunk), size):
                x = int.from_bytes(chunk[i : i + size], "little") & mask
                if x < modulus:
                    vec.append(x)
        return vec

    @classmethod
    def derive_seed(cls, seed: bytes, dst: bytes, binder: bytes) -> bytes:
        return cls(seed, dst, binder).next(cls.SEED_SIZE)

    @classmethod
    def expand_into_vec(cls, field: type[Field], seed: bytes, dst: bytes, binder: bytes, length: int) -> Vec:
        return cls(seed, dst, binder).next_vec(field, length)
