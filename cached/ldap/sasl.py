"""The SASL security layer of a GSSAPI bind (RFC 4752, RFC 4422 §3.7), sans-IO.

An Active Directory DC requires, by default, that an LDAP session over plain port 389
be signed or sealed (Samba: ``ldap server require strong auth = yes``; Windows: LDAP
signing). After a SASL GSSAPI bind negotiates a layer, every LDAP message in either
direction travels inside a *SASL buffer*: a four-octet big-endian length, then a token
made by GSS_Wrap (integrity, or integrity and confidentiality). This module holds the
parts that need no Kerberos and no socket: the buffer framing (:class:`SaslBuffer`,
bytes in, whole tokens out, like framing.MessageBuffer one level below), the layer
negotiation's two messages (:func:`choose_layer`, :func:`layer_reply`) and the split
of a message into buffers the peer accepts (:func:`frames`). The GSS calls that make
and open the tokens are kerberos.py's; connection.py joins them on the socket.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

# RFC 4752 §3.3: the security layers, as bits of the first octet.
LAYER_NONE = 1
LAYER_INTEGRITY = 2
LAYER_CONFIDENTIALITY = 4
LAYER_NAMES = {LAYER_NONE: "none", LAYER_INTEGRITY: "sign", LAYER_CONFIDENTIALITY: "seal"}

# The largest SASL buffer we accept and announce: 16 MiB is the three octets' limit
# (RFC 4752's maximum size field); an LDAP message larger than one buffer spans several
# (framing.MessageBuffer joins them).
MAX_BUFFER = (1 << 24) - 1
# A buffer the server announces as 0 means "no limit of its own"; send in pieces of
# this size then (Windows and Samba announce 0x989680, ~10 MB).
DEFAULT_SEND = 64 * 1024


class SaslError(ValueError):
    """A SASL buffer or layer message that breaks RFC 4752, or a token that does not
    wrap or unwrap: the stream is lost."""


@dataclass(frozen=True, slots=True)
class Layer:
    """The layer chosen: its bit and the largest buffer the server accepts."""

    kind: int
    server_max: int

    @property
    def confidential(self) -> bool:
        return self.kind == LAYER_CONFIDENTIALITY

    @property
    def name(self) -> str:
        return LAYER_NAMES[self.kind]


def choose_layer(offer: bytes, *, min_ssf: int) -> Layer:
    """The layer to use from the server's offer (the unwrapped four octets: the bits of
    the layers it supports, then its largest buffer). Sealing when offered, else
    signing; no layer only when ``min_ssf`` is 0 and nothing else is offered. SSSD's
    AD default (ldap_sasl_minssf unset, maxssf unset) likewise ends sealed."""
    if len(offer) != 4:
        raise SaslError(f"the server's layer offer is {len(offer)} octets, not 4")
    bits = offer[0]
    server_max = int.from_bytes(offer[1:4], "big")
    for kind in (LAYER_CONFIDENTIALITY, LAYER_INTEGRITY):
        if bits & kind:
            if min_ssf > 1 and kind == LAYER_INTEGRITY:
                # An SSF above 1 asks for encryption (cyrus-sasl: integrity is SSF 1).
                break
            return Layer(kind, server_max)
    if bits & LAYER_NONE and min_ssf <= 0:
        return Layer(LAYER_NONE, 0)
    raise SaslError(
        f"the server offers no security layer cached accepts (offered bits {bits:#04x}, "
        f"ldap_sasl_minssf = {min_ssf})"
    )


def layer_reply(layer: Layer, authzid: bytes = b"") -> bytes:
    """The client's answer before wrapping: the chosen layer, our largest buffer (0
    without a layer, RFC 4752 §3.1), then the authorization identity (none: the
    authenticated one)."""
    size = MAX_BUFFER if layer.kind != LAYER_NONE else 0
    return bytes([layer.kind]) + size.to_bytes(3, "big") + authzid


def frames(tokens: list[bytes]) -> bytes:
    """Wrapped tokens as SASL buffers on the wire."""
    return b"".join(len(t).to_bytes(4, "big") + t for t in tokens)


def pieces(data: bytes, layer: Layer, overhead: int = 64) -> list[bytes]:
    """``data`` cut so that each wrapped piece fits the server's largest buffer
    (``overhead``: what wrapping adds, a bound for Kerberos' AES tokens)."""
    most = (layer.server_max or DEFAULT_SEND) - overhead
    most = max(1024, min(most, DEFAULT_SEND * 16))
    if len(data) <= most:
        return [data]
    return [data[i : i + most] for i in range(0, len(data), most)]


class SaslBuffer:
    """Bytes of a layered stream in, whole wrapped tokens out, in order; a buffer
    announcing more than ``limit`` octets raises :class:`SaslError`."""

    __slots__ = ("_buf", "limit")

    def __init__(self, limit: int = MAX_BUFFER) -> None:
        self.limit = limit
        self._buf = bytearray()

    @property
    def pending(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        buf = self._buf
        buf += data
        out: list[bytes] = []
        pos = 0
        end = len(buf)
        while end - pos >= 4:
            size = int.from_bytes(buf[pos : pos + 4], "big")
            if size > self.limit:
                raise SaslError(f"a SASL buffer of {size} octets, over the {self.limit} limit")
            if end - pos - 4 < size:
                break
            out.append(bytes(buf[pos + 4 : pos + 4 + size]))
            pos += 4 + size
        if pos:
            del buf[:pos]
        return out


class GssContext(Protocol):
    """What the transport needs of a GSS security context (kerberos.Context)."""

    layer: Layer | None

    @property
    def complete(self) -> bool: ...

    def step(self, token: bytes | None) -> bytes: ...

    def wrap(self, data: bytes, *, seal: bool) -> bytes: ...

    def unwrap(self, token: bytes, *, sealed: bool) -> bytes: ...
