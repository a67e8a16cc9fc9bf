"""cached/ldap/framing.py: MessageBuffer, bytes in, whole LDAP messages out. Bytes
only: no socket, no connection (the socket loop around it: test_ldap_receive.py).
Every test runs on both splits of the buffer: the C one (_ber.frames, where it was
built) and MessageBuffer.feed's own loop, its reference; and random streams cut at
random give both the same messages and the same refusals."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from cached.ldap import framing
from cached.ldap.framing import MAX_MESSAGE, FramingError, MessageBuffer, MessageTooLarge

C_SPLIT = getattr(framing, "_frames")  # noqa: B009 (not exported)
SPLITS = ["python"] + (["c"] if C_SPLIT is not None else [])


@pytest.fixture(autouse=True, params=SPLITS)
def split(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "python":
        monkeypatch.setattr(framing, "_frames", None)
    yield request.param


def msg(n: int, fill: bytes = b"v", octets: int = 0) -> bytes:
    """A SEQUENCE of ``n`` value bytes: short form, or long form in ``octets`` octets."""
    if not octets and n < 0x80:
        return bytes([0x30, n]) + fill * n
    octets = octets or (n.bit_length() + 7) // 8
    return bytes([0x30, 0x80 | octets]) + n.to_bytes(octets, "big") + fill * n


# Every length form: short, and long forms of one to four octets (0x82 has its own path).
MESSAGES = [msg(0), msg(5, b"a"), msg(127, b"b"), msg(200, b"c"), msg(300, b"d", 2),
            msg(70_000, b"e"), msg(90, b"f", 4), msg(1, b"g")]  # fmt: skip
STREAM = b"".join(MESSAGES)


def feed_all(buf: MessageBuffer, chunks: list[bytes]) -> list[bytes]:
    out: list[bytes] = []
    for c in chunks:
        out += buf.feed(c)
    return out


def test_several_messages_in_one_chunk_come_out_in_order():
    buf = MessageBuffer()
    assert buf.feed(STREAM) == MESSAGES
    assert buf.pending == 0


@pytest.mark.parametrize("cut", range(1, 400))
def test_a_stream_split_anywhere_gives_the_same_messages(cut):
    buf = MessageBuffer()
    got = buf.feed(STREAM[:cut])
    assert buf.pending == len(STREAM[: cut]) - sum(map(len, got))
    got += buf.feed(STREAM[cut:])
    assert got == MESSAGES and buf.pending == 0


def test_a_stream_fed_one_byte_at_a_time_gives_the_same_messages():
    want = MESSAGES[:5] + MESSAGES[6:]
    small = b"".join(want)
    assert feed_all(MessageBuffer(), [small[i : i + 1] for i in range(len(small))]) == want


@pytest.mark.parametrize("octets", [1, 2, 3, 4, 8])
def test_a_long_form_header_cut_at_each_octet_is_read_once_whole(octets):
    m = msg(200 if octets == 1 else 300, b"w", octets)
    for cut in range(1, 3 + octets):
        buf = MessageBuffer()
        assert buf.feed(m[:cut]) == []
        assert buf.feed(m[cut:]) == [m]


def test_messages_are_bytes_unchanged_by_later_chunks():
    buf = MessageBuffer()
    first = buf.feed(msg(50, b"1") + msg(3000, b"2")[:10])
    assert first == [msg(50, b"1")] and type(first[0]) is bytes
    second = buf.feed(msg(3000, b"2")[10:] + msg(3, b"3"))
    assert second == [msg(3000, b"2"), msg(3, b"3")]
    assert first == [msg(50, b"1")]


@pytest.mark.parametrize("octets", [1, 2, 3, 4])
def test_a_header_over_the_cap_is_refused_before_the_message_comes(octets):
    buf = MessageBuffer(limit=250)
    assert buf.feed(msg(247, octets=1)) == [msg(247, octets=1)]  # 250 with its header
    with pytest.raises(MessageTooLarge) as e:
        buf.feed(msg(251 - 2 - octets, octets=octets)[: 2 + octets])  # announced, none sent
    assert e.value.size == 251 and e.value.limit == 250
    assert "251" in str(e.value) and "250" in str(e.value)


def test_a_limit_below_a_short_form_message_is_refused():
    with pytest.raises(ValueError):
        MessageBuffer(limit=128)


def test_the_default_cap_is_max_message():
    size = MAX_MESSAGE + 1 - 6
    with pytest.raises(MessageTooLarge) as e:
        MessageBuffer().feed(bytes([0x30, 0x84]) + size.to_bytes(4, "big") + b"z" * 100)
    assert e.value.size == MAX_MESSAGE + 1


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x30\x80\x02\x01\x01\x00\x00",  # indefinite length (RFC 4511 §5.1: definite only)
        b"\x30\x89" + b"\x01" * 9,  # nine length octets
        b"\x30\xff" + b"\x01" * 20,
    ],
)
def test_a_length_that_is_not_a_definite_ber_length_is_refused(garbage):
    with pytest.raises(FramingError, match="BER length"):
        MessageBuffer().feed(garbage)


def test_a_garbage_length_after_good_messages_is_refused():
    buf = MessageBuffer()
    with pytest.raises(FramingError):
        buf.feed(msg(3) + b"\x30\x80")


def test_an_empty_chunk_gives_nothing():
    buf = MessageBuffer()
    assert buf.feed(b"") == []
    assert buf.feed(msg(3)[:1]) == [] and buf.feed(b"") == [] and buf.pending == 1


def _outcome(chunks: list[bytes], limit: int) -> tuple[list[bytes], int, str]:
    buf = MessageBuffer(limit)
    out: list[bytes] = []
    try:
        for c in chunks:
            out += buf.feed(c)
    except (FramingError, MessageTooLarge) as e:
        return out, buf.pending, f"{type(e).__name__}: {e}"
    return out, buf.pending, ""


@pytest.mark.skipif(C_SPLIT is None, reason="cached/ldap/_ber.c not built")
@pytest.mark.parametrize("seed", range(30))
def test_c_and_python_splits_agree_on_random_streams(seed: int, monkeypatch) -> None:
    rng = random.Random(seed)
    parts = []
    for _ in range(rng.randint(1, 40)):
        n = rng.choice([0, 1, 5, 0x7F, 0x80, 200, 300, 1000, 70_000])
        octets = rng.choice([0, 0, 1, 2, 3, 4, 8]) if n else 0
        parts.append(msg(n, b"x", max(octets, (n.bit_length() + 7) // 8) if octets else 0))
    if rng.random() < 0.4:  # damage: a bad length octet, or a header over the limit
        parts.append(rng.choice([b"\x30\x80\x00", b"\x30\x89" + b"\x01" * 9,
                                 b"\x30\x88" + b"\xff" * 8, msg(5000, b"y", 2)]))
    stream = b"".join(parts)
    cuts = sorted(rng.sample(range(len(stream) + 1), min(len(stream) + 1, rng.randint(0, 12))))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    limit = rng.choice([0x81, 4000, MAX_MESSAGE])
    got = _outcome(chunks, limit)
    monkeypatch.setattr(framing, "_frames", None)
    assert got == _outcome(chunks, limit)
