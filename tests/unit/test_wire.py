"""The strings of a request as every codec reads them (``wire.nul_terminated``: the
NSS name, the sudo user, the SSH names, the PAM string items): each accepted and
refused form, the cases the codecs' own tests send."""

from __future__ import annotations

import pytest

from cached.responder.wire import nul_terminated


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        (b"alice\0", "alice"),
        (b"\xc3\xa9lodie\0", "\u00e9lodie"),
        (b"a" * 256 + b"\0", "a" * 256),
        (bytearray(b"alice\0"), "alice"),  # the PAM and sudo bodies are bytearrays
    ],
)
def test_accepted(raw: bytes, text: str) -> None:
    assert nul_terminated(raw, "name") == text
    assert nul_terminated(raw, "name", empty=False, max_bytes=256) == text


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"", "name is not NUL-terminated"),
        (b"alice", "name is not NUL-terminated"),
        (b"ali\0ce\0", "name holds a NUL"),
        (b"\0\0", "name holds a NUL"),
        (b"\xff\xfe\0", "name is not UTF-8"),
        (b"\xc3\0", "name is not UTF-8"),  # a sequence cut by the NUL
    ],
)
def test_refused_by_every_codec(raw: bytes, why: str) -> None:
    with pytest.raises(ValueError) as info:
        nul_terminated(raw, "name")
    assert str(info.value) == why
    with pytest.raises(ValueError) as info:
        nul_terminated(raw, "name", empty=False, max_bytes=256)
    assert str(info.value) == why


def test_empty_and_long_refused_only_where_the_codec_says() -> None:
    # SSH and PAM take an empty string (b"\0"); NSS refuses it, and a name over
    # LOGIN_NAME_MAX (256 bytes), checked before the bytes are decoded.
    assert nul_terminated(b"\0", "name") == ""
    with pytest.raises(ValueError, match=r"^name is empty$"):
        nul_terminated(b"\0", "name", empty=False)
    assert nul_terminated(b"a" * 257 + b"\0", "name") == "a" * 257
    with pytest.raises(ValueError, match=r"^name is 257 bytes, longer than 256$"):
        nul_terminated(b"\xff" * 257 + b"\0", "name", max_bytes=256)
