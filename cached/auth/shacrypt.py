"""SHA-512-crypt (``$6$``), Ulrich Drepper's "Unix crypt using SHA-256 and SHA-512"
(https://www.akkadia.org/drepper/SHA-crypt.txt), on hashlib.

The hash of cached credentials: SSSD stores the same format (``sysdb_cache_password``,
``crypto_sha512crypt.c``: a 16-character salt, the default 5,000 rounds), which glibc's
``crypt(3)`` and ``openssl passwd -6`` compute too. The stdlib ``crypt`` module is
deprecated (PEP 594) and gone in Python 3.13, hence this implementation.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

PREFIX = "$6$"
ROUNDS_DEFAULT = 5000
ROUNDS_MIN = 1000
ROUNDS_MAX = 999_999_999
SALT_MAX = 16
_ITOA64 = "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
# The order in which the 64 digest bytes are taken, three at a time, into the base-64
# text (the spec's step 22, for SHA-512).
_ORDER = (
    (0, 21, 42), (22, 43, 1), (44, 2, 23), (3, 24, 45), (25, 46, 4), (47, 5, 26),
    (6, 27, 48), (28, 49, 7), (50, 8, 29), (9, 30, 51), (31, 52, 10), (53, 11, 32),
    (12, 33, 54), (34, 55, 13), (56, 14, 35), (15, 36, 57), (37, 58, 16), (59, 17, 38),
    (18, 39, 60), (40, 61, 19), (62, 20, 41),
)  # fmt: skip


def _b64(b2: int, b1: int, b0: int, n: int) -> str:
    w = (b2 << 16) | (b1 << 8) | b0
    out = []
    for _ in range(n):
        out.append(_ITOA64[w & 0x3F])
        w >>= 6
    return "".join(out)


def _repeat(digest: bytes, length: int) -> bytes:
    return (digest * (length // len(digest) + 1))[:length]


def _digest(password: bytes, salt: bytes, rounds: int) -> bytes:
    p, s = password, salt
    b = hashlib.sha512(p + s + p).digest()
    a = hashlib.sha512(p + s)
    a.update(_repeat(b, len(p)))
    i = len(p)
    while i:
        a.update(b if i & 1 else p)
        i >>= 1
    c = a.digest()
    p_seq = _repeat(hashlib.sha512(p * len(p)).digest(), len(p))
    s_seq = _repeat(hashlib.sha512(s * (16 + c[0])).digest(), len(s))
    for r in range(rounds):
        h = hashlib.sha512(p_seq if r & 1 else c)
        if r % 3:
            h.update(s_seq)
        if r % 7:
            h.update(p_seq)
        h.update(c if r & 1 else p_seq)
        c = h.digest()
    return c


def sha512_crypt(password: bytes, salt: str, rounds: int | None = None) -> str:
    """The ``$6$`` hash of ``password`` with ``salt`` (cut at 16 characters, as the
    spec says); ``rounds`` None: the default 5,000, not written in the hash."""
    salt = salt[:SALT_MAX]
    if any(ch in "$:\n" for ch in salt):
        raise ValueError("a salt must not contain '$', ':' or a newline")
    n = ROUNDS_DEFAULT if rounds is None else min(max(rounds, ROUNDS_MIN), ROUNDS_MAX)
    c = _digest(password, salt.encode("ascii"), n)
    text = "".join(_b64(c[x], c[y], c[z], 4) for x, y, z in _ORDER) + _b64(0, 0, c[63], 2)
    head = PREFIX if rounds is None else f"{PREFIX}rounds={n}$"
    return f"{head}{salt}${text}"


def new_hash(password: bytes) -> str:
    """A hash with a fresh 16-character salt from the system's CSPRNG."""
    salt = "".join(secrets.choice(_ITOA64) for _ in range(SALT_MAX))
    return sha512_crypt(password, salt)


def parse(hashed: str) -> tuple[str, int | None]:
    """The salt and the rounds (None: default, not written) of a ``$6$`` hash;
    ValueError for another format."""
    if not hashed.startswith(PREFIX):
        raise ValueError("not a SHA-512-crypt ($6$) hash")
    rest = hashed[len(PREFIX) :]
    rounds = None
    if rest.startswith("rounds="):
        text, _, rest = rest[len("rounds=") :].partition("$")
        if not text.isdigit():
            raise ValueError("bad rounds= in a $6$ hash")
        rounds = int(text)
    salt, sep, _ = rest.partition("$")
    if not sep:
        raise ValueError("a $6$ hash without its digest")
    return salt, rounds


def verify(password: bytes, hashed: str) -> bool:
    """Whether ``password`` hashes to ``hashed``, compared in constant time."""
    try:
        salt, rounds = parse(hashed)
    except ValueError:
        return False
    return hmac.compare_digest(sha512_crypt(password, salt, rounds).encode(), hashed.encode())
