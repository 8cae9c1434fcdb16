"""The string hashes of Keras's hashing layers, bit for bit, in pure Python (no TensorFlow).

Keras's ``Hashing``, ``HashedCrossing`` and the lookups' ``oov_method="farmhash"`` call TensorFlow's
string hashes, whose results a converted model must reproduce exactly (a different bucket is a different
embedding row):

* :func:`fingerprint64`: Google FarmHash's ``Fingerprint64`` (``farmhashna::Hash64``), which
  ``tf.strings.to_hash_bucket_fast`` computes: ``bucket = fingerprint64(utf8 bytes) mod num_bins``;
* :func:`siphash64`: SipHash-2-4 keyed by two 64-bit words (highwayhash's ``SipHash``), which
  ``tf.strings.to_hash_bucket_strong`` computes with the layer's ``salt`` as the key;
* :func:`fingerprint_cat64`: TensorFlow's ``FingerprintCat64``, which ``tf.sparse.cross_hashed`` uses to
  combine the features of one cross.

All arithmetic is on unsigned 64-bit words (Python ints masked to 64 bits).
"""

from __future__ import annotations

__all__ = ["fingerprint64", "siphash64", "fingerprint_cat64", "as_bytes", "CROSS_HASH_KEY"]

MASK = (1 << 64) - 1
K0 = 0xC3A5C85C97CB3127
K1 = 0xB492B66FBE98F273
K2 = 0x9AE16A3B2F90404F
K_MUL = 0xC6A4A7935BD1E995  # FingerprintCat64's multiplier
CROSS_HASH_KEY = 0xDECAFCAFFE  # tf.sparse.cross_hashed's default hash_key


def as_bytes(value: str | bytes | int) -> bytes:
    """What TensorFlow hashes for a value: a string's UTF-8 bytes; an integer's decimal text
    (``tf.strings.as_string``)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    return str(int(value)).encode("ascii")


def _fetch64(s: bytes, i: int) -> int:
    return int.from_bytes(s[i : i + 8], "little")


def _fetch32(s: bytes, i: int) -> int:
    return int.from_bytes(s[i : i + 4], "little")


def _rotate(value: int, shift: int) -> int:
    """Rotate right by ``shift`` bits (FarmHash's ``Rotate64``)."""
    return value if shift == 0 else ((value >> shift) | (value << (64 - shift))) & MASK


def _shift_mix(value: int) -> int:
    return value ^ (value >> 47)


def _hash_len16(u: int, v: int, mul: int) -> int:
    a = ((u ^ v) * mul) & MASK
    a ^= a >> 47
    b = ((v ^ a) * mul) & MASK
    b ^= b >> 47
    return (b * mul) & MASK


def _hash_len0to16(s: bytes) -> int:
    n = len(s)
    if n >= 8:
        mul = K2 + n * 2
        a = (_fetch64(s, 0) + K2) & MASK
        b = _fetch64(s, n - 8)
        c = (_rotate(b, 37) * mul + a) & MASK
        d = ((_rotate(a, 25) + b) * mul) & MASK
        return _hash_len16(c, d, mul)
    if n >= 4:
        mul = K2 + n * 2
        a = _fetch32(s, 0)
        return _hash_len16((n + (a << 3)) & MASK, _fetch32(s, n - 4), mul)
    if n > 0:
        y = s[0] + (s[n >> 1] << 8)
        z = n + (s[n - 1] << 2)
        return (_shift_mix(((y * K2) ^ (z * K0)) & MASK) * K2) & MASK
    return K2


def _hash_len17to32(s: bytes) -> int:
    n = len(s)
    mul = K2 + n * 2
    a = (_fetch64(s, 0) * K1) & MASK
    b = _fetch64(s, 8)
    c = (_fetch64(s, n - 8) * mul) & MASK
    d = (_fetch64(s, n - 16) * K2) & MASK
    return _hash_len16(
        (_rotate((a + b) & MASK, 43) + _rotate(c, 30) + d) & MASK,
        (a + _rotate((b + K2) & MASK, 18) + c) & MASK,
        mul,
    )


def _hash_len33to64(s: bytes) -> int:
    n = len(s)
    mul = K2 + n * 2
    a = (_fetch64(s, 0) * K2) & MASK
    b = _fetch64(s, 8)
    c = (_fetch64(s, n - 8) * mul) & MASK
    d = (_fetch64(s, n - 16) * K2) & MASK
    y = (_rotate((a + b) & MASK, 43) + _rotate(c, 30) + d) & MASK
    z = _hash_len16(y, (a + _rotate((b + K2) & MASK, 18) + c) & MASK, mul)
    e = (_fetch64(s, 16) * mul) & MASK
    f = _fetch64(s, 24)
    g = ((y + _fetch64(s, n - 32)) * mul) & MASK
    h = ((z + _fetch64(s, n - 24)) * mul) & MASK
    return _hash_len16(
        (_rotate((e + f) & MASK, 43) + _rotate(g, 30) + h) & MASK,
        (e + _rotate((f + a) & MASK, 18) + g) & MASK,
        mul,
    )


def _weak_hash_len32_with_seeds(s: bytes, i: int, a: int, b: int) -> tuple[int, int]:
    w, x, y, z = _fetch64(s, i), _fetch64(s, i + 8), _fetch64(s, i + 16), _fetch64(s, i + 24)
    a = (a + w) & MASK
    b = _rotate((b + a + z) & MASK, 21)
    c = a
    a = (a + x + y) & MASK
    b = (b + _rotate(a, 44)) & MASK
    return (a + z) & MASK, (b + c) & MASK


def fingerprint64(data: bytes) -> int:
    """FarmHash ``Fingerprint64`` of ``data`` (``farmhashna::Hash64``, seed 81 for inputs over 64 bytes)."""
    n = len(data)
    if n <= 16:
        return _hash_len0to16(data)
    if n <= 32:
        return _hash_len17to32(data)
    if n <= 64:
        return _hash_len33to64(data)
    seed = 81
    x = seed
    y = (seed * K1 + 113) & MASK
    z = (_shift_mix((y * K2 + 113) & MASK) * K2) & MASK
    v0 = v1 = w0 = w1 = 0
    x = (x * K2 + _fetch64(data, 0)) & MASK
    end = ((n - 1) // 64) * 64
    last64 = end + ((n - 1) & 63) - 63
    i = 0
    while True:
        x = (_rotate((x + y + v0 + _fetch64(data, i + 8)) & MASK, 37) * K1) & MASK
        y = (_rotate((y + v1 + _fetch64(data, i + 48)) & MASK, 42) * K1) & MASK
        x ^= w1
        y = (y + v0 + _fetch64(data, i + 40)) & MASK
        z = (_rotate((z + w0) & MASK, 33) * K1) & MASK
        v0, v1 = _weak_hash_len32_with_seeds(data, i, (v1 * K1) & MASK, (x + w0) & MASK)
        w0, w1 = _weak_hash_len32_with_seeds(data, i + 32, (z + w1) & MASK, (y + _fetch64(data, i + 16)) & MASK)
        z, x = x, z
        i += 64
        if i == end:
            break
    mul = K1 + ((z & 0xFF) << 1)
    i = last64
    w0 = (w0 + ((n - 1) & 63)) & MASK
    v0 = (v0 + w0) & MASK
    w0 = (w0 + v0) & MASK
    x = (_rotate((x + y + v0 + _fetch64(data, i + 8)) & MASK, 37) * mul) & MASK
    y = (_rotate((y + v1 + _fetch64(data, i + 48)) & MASK, 42) * mul) & MASK
    x ^= (w1 * 9) & MASK
    y = (y + v0 * 9 + _fetch64(data, i + 40)) & MASK
    z = (_rotate((z + w0) & MASK, 33) * mul) & MASK
    v0, v1 = _weak_hash_len32_with_seeds(data, i, (v1 * mul) & MASK, (x + w0) & MASK)
    w0, w1 = _weak_hash_len32_with_seeds(data, i + 32, (z + w1) & MASK, (y + _fetch64(data, i + 16)) & MASK)
    z, x = x, z
    return _hash_len16(
        (_hash_len16(v0, w0, mul) + _shift_mix(y) * K0 + z) & MASK,
        (_hash_len16(v1, w1, mul) + x) & MASK,
        mul,
    )


def _sip_round(v0: int, v1: int, v2: int, v3: int) -> tuple[int, int, int, int]:
    v0 = (v0 + v1) & MASK
    v1 = _rotl(v1, 13) ^ v0
    v0 = _rotl(v0, 32)
    v2 = (v2 + v3) & MASK
    v3 = _rotl(v3, 16) ^ v2
    v0 = (v0 + v3) & MASK
    v3 = _rotl(v3, 21) ^ v0
    v2 = (v2 + v1) & MASK
    v1 = _rotl(v1, 17) ^ v2
    v2 = _rotl(v2, 32)
    return v0, v1, v2, v3


def _rotl(value: int, shift: int) -> int:
    return ((value << shift) | (value >> (64 - shift))) & MASK


def siphash64(key: tuple[int, int] | list[int], data: bytes) -> int:
    """SipHash-2-4 of ``data`` under the 128-bit key ``(k0, k1)`` (each taken mod 2**64, as TensorFlow
    reads the int64 ``key`` attribute as uint64)."""
    k0, k1 = int(key[0]) & MASK, int(key[1]) & MASK
    v0, v1 = k0 ^ 0x736F6D6570736575, k1 ^ 0x646F72616E646F6D
    v2, v3 = k0 ^ 0x6C7967656E657261, k1 ^ 0x7465646279746573
    n = len(data)
    full = n - n % 8
    for i in range(0, full, 8):
        m = _fetch64(data, i)
        v3 ^= m
        v0, v1, v2, v3 = _sip_round(*_sip_round(v0, v1, v2, v3))
        v0 ^= m
    last = int.from_bytes(data[full:], "little") | ((n & 0xFF) << 56)
    v3 ^= last
    v0, v1, v2, v3 = _sip_round(*_sip_round(v0, v1, v2, v3))
    v0 ^= last
    v2 ^= 0xFF
    for _ in range(4):
        v0, v1, v2, v3 = _sip_round(v0, v1, v2, v3)
    return v0 ^ v1 ^ v2 ^ v3


def fingerprint_cat64(fp1: int, fp2: int) -> int:
    """TensorFlow's ``FingerprintCat64``: two fingerprints combined (order matters)."""
    result = fp1 ^ K_MUL
    result ^= (_shift_mix((fp2 * K_MUL) & MASK) * K_MUL) & MASK
    result = (result * K_MUL) & MASK
    result = (_shift_mix(result) * K_MUL) & MASK
    return _shift_mix(result)
