"""cached/ldap/_ber.c, the C SearchResultEntry reader: built, chosen by entry.py, giving
the reference's (entry.read_entry) answer on random damage to real shapes, and never
reading an octet past its buffer. tests/unit/test_deref_entries.py runs both readers on
the named shapes. Pure logic."""

from __future__ import annotations

import os
import random
import subprocess
import sys

from cached.ldap import ber
from cached.ldap import entry as ldap_entry
from tests.unit import test_deref_rows as rows_t
from tests.unit.test_deref_entries import GROUP, MEMBERS, attr, entry

try:
    from cached.ldap import _ber
except ImportError:
    _ber = None  # type: ignore[assignment]


def test_the_c_reader_is_built_and_chosen():
    assert _ber is not None, (
        "cached/ldap/_ber.c is not built: `pip install -e .` with gcc and python3-dev "
        "installed builds it (contrib/install-deps installs them)"
    )
    assert ldap_entry.decode_entry is _ber.decode_entry  # what the client calls
    assert ldap_entry.decode_rows is _ber.decode_rows


def _damaged(rng: random.Random, good: bytes) -> bytes:
    """``good`` with one to three random changes: an octet replaced (by a random one
    or a length-form octet), octets cut, inserted or dropped."""
    b = bytearray(good)
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(b)) if b else 0
        kind = rng.randrange(5)
        if kind == 0 and b:
            b[at] = rng.randrange(256)
        elif kind == 1 and b:
            b[at] = rng.choice((0x00, 0x01, 0x7F, 0x80, 0x81, 0x82, 0x83, 0x84, 0xFF))
        elif kind == 2:
            del b[rng.randrange(len(b) + 1) :]
        elif kind == 3:
            b[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
        elif b:
            del b[at : at + rng.randint(1, 4)]
    return bytes(b)


def _cut_inside() -> list[bytes]:
    """Messages whose last attribute is cut inside, with every enclosing length
    (message, entry, list, attribute, SET) ending at the cut: the reader meets the
    cut header at the last octets of the buffer, where a read of the next octet is
    one past it."""
    tails = []
    for value in (b"\x04\x01a", b"\x04\x81\x80" + b"v" * 128, b"\x04\x82\x01\x00" + b"v" * 256):
        for cut in range(len(value) + 1):
            tails.append(ber.tlv(0x30, ber.tlv(0x04, b"cn") + ber.tlv(0x31, value[:cut])))
    head = b"\x04\x02cn\x31\x81\x00"
    tails += [ber.tlv(0x30, head[:cut]) for cut in range(len(head) + 1)]
    tails += [b"\x30", b"\x30\x81", b"\x30\x82\x00", b"\x30\x83\x00\x00"]
    out = [entry(attr(b"gidNumber", b"1"), tail) for tail in tails]
    # And every cut of a message's body, and of its entry's, under lengths that end
    # at the cut.
    body = entry(attr(b"cn", b"ab"), attr(b"gidNumber", b"7"))[2:]
    out += [ber.tlv(0x30, body[:cut]) for cut in range(len(body) + 1)]
    op = body[5:]  # 02 01 07 64 len: the entry's body
    assert body[3] == 0x64 and len(op) == body[4]
    cuts = range(len(op) + 1)
    return out + [ber.tlv(0x30, body[:3] + ber.tlv(0x64, op[:cut])) for cut in cuts]


def test_both_readers_agree_on_random_damage_to_real_shapes():
    """The C reader against the reference on 60,000 damaged messages: the same
    answer (None included) and the same names table after each; every other message
    with the member values interned (equal values, whatever the damage)."""
    c = _ber.decode_entry
    rng = random.Random(20261202)
    shapes = [GROUP, entry(attr(b"cn", b"ab"), attr(b"gidNumber", b"7"), msgid=b"\x00\xff"),
              entry(attr(b"CN", b"x" * 200), attr(b"member", *MEMBERS[:3]), msgid=b"\x81"),
              entry(attr(b"description", b"y" * 300), attr(b"cn"))]  # fmt: skip
    accepted = 0
    cases = [_damaged(rng, shapes[i % len(shapes)]) for i in range(60_000)] + _cut_inside()
    for bad in cases:
        py_names: dict[bytes, str] = {b"cn": "cn"}
        c_names: dict[bytes, str] = {b"cn": "cn"}
        want = ldap_entry.read_entry(bad, py_names, 3)
        got = c(bad, c_names, 3, INTERNED) if accepted % 2 else c(bad, c_names, 3)
        assert got == want, bad.hex()
        assert c_names == py_names, bad.hex()
        accepted += want is not None
    _ber.intern_clear()
    assert 1_000 < accepted < 59_000  # the damage both accepted and declined


INTERNED = frozenset({"member"})


def test_interned_values_are_one_object_per_value_until_cleared():
    """decode_entry's interned types: a value met in two entries is one object (equal
    to the reference's), other types' values are not shared, intern_clear lets them
    go; past the table's bound values are made as before, still equal."""
    _ber.intern_clear()
    names: dict[bytes, str] = {}
    one = entry(attr(b"member", *MEMBERS[:5]), attr(b"cn", b"g1"), attr(b"uid", b"same"))
    two = entry(attr(b"member", *MEMBERS[3:8]), attr(b"cn", b"g2"), attr(b"uid", b"same"))
    a, b = _ber.decode_entry(one, names, 9, INTERNED), _ber.decode_entry(two, names, 9, INTERNED)
    assert a is not None and b is not None
    assert a == ldap_entry.read_entry(one, {}, 9) and b == ldap_entry.read_entry(two, {}, 9)
    ma, mb = a[2]["member"], b[2]["member"]
    assert ma[3] is mb[0] and ma[4] is mb[1]  # MEMBERS[3], MEMBERS[4] in both
    assert a[2]["uid"][0] == b[2]["uid"][0] and a[2]["uid"][0] is not b[2]["uid"][0]
    _ber.intern_clear()
    c = _ber.decode_entry(two, names, 9, INTERNED)
    assert c is not None and c[2]["member"] == mb and c[2]["member"][0] is not mb[0]
    # More distinct values than the table keeps (65,536): the same answers.
    many = [b"uid=u%06d,ou=people,dc=x" % i for i in range(70_000)]
    for i in range(0, len(many), 1_000):
        msg = entry(attr(b"member", *many[i : i + 1_000]))
        assert _ber.decode_entry(msg, names, 9, INTERNED) == ldap_entry.read_entry(msg, {}, 9)
    again = _ber.decode_entry(entry(attr(b"member", many[0], many[-1])), names, 9, INTERNED)
    assert again is not None and again[2]["member"] == [many[0], many[-1]]
    _ber.intern_clear()


def _row_message(rng: random.Random) -> bytes:
    """A small entry of a row search: random types (asked or not, in any case, now
    and then not ASCII or twice), values, message IDs and DNs (now and then not
    UTF-8)."""
    types = [b"uid", b"UID", b"uidNumber", b"gidNumber", b"cn", b"objectClass", "uİd".encode()]
    attrs = [rows_t.attr(rng.choice(types), *[bytes(rng.choice(b"abc19") for _ in
                                                    range(rng.randint(0, 12)))
                                              for _ in range(rng.choice((0, 1, 1, 1, 2)))])
             for _ in range(rng.randint(0, 4))]  # fmt: skip
    msgid = rng.choice((b"\x07", b"\x08", b"\xff", b"\x00\xff", b"\x00\x07", b"\x00\x00\x07"))
    dn = rng.choice((rows_t.DN, b"uid=x,dc=test", b"uid=\xff,dc=test", b""))
    return rows_t.entry(*attrs, msgid=msgid, dn=dn)


def _row_cuts() -> list[bytes]:
    """Rows cut inside, every enclosing length ending at the cut: of the attribute
    list and of its last attribute (a header cut at the buffer's end), and of the
    entry (an objectName or a list header cut there)."""
    body = b"".join(rows_t.attr(k, v) for k, v in ((b"gidNumber", b"1"), (b"uid", b"ab")))
    out = [rows_t.entry(body[:cut]) for cut in range(len(body) + 1)]
    inner = b"\x04\x03uid\x31\x03\x04\x01a"  # and of the last attribute, under its length
    out += [rows_t.entry(body + rows_t.tlv(0x30, inner[:cut])) for cut in range(len(inner) + 1)]
    op = rows_t.entry(rows_t.attr(b"uid", b"a"))[7:]  # after 30 len 02 01 07 64 len
    for cut in range(len(op) + 1):
        out.append(rows_t.tlv(0x30, b"\x02\x01\x07" + rows_t.tlv(0x64, op[:cut])))
    return out


def _row_shapes(learnt: bool) -> dict[int, ldap_entry.RowShape]:
    shapes = {m: ldap_entry.RowShape(rows_t.ATTRS, []) for m in (7, -1, 255)}
    if learnt:  # the reference's layout learnt (and its spellings met) on both sides
        ldap_entry.decode_row(rows_t.GOOD, shapes)
    return shapes


def test_both_row_readers_agree_on_random_runs():
    """C decode_rows against the reference (read_rows, decode_row) on 20,000 runs of
    one to six small entries, a third of them damaged: the same index returned, the
    same rows for each search and the same tables of spellings."""
    rng = random.Random(1202)
    read = 0
    for _ in range(20_000):
        run = [_row_message(rng) for _ in range(rng.randint(1, 6))]
        run = [_damaged(rng, m) if rng.random() < 0.33 else m for m in run]
        start = rng.randint(0, len(run))
        learnt = rng.random() < 0.5
        want, got = _row_shapes(learnt), _row_shapes(learnt)
        i = ldap_entry.read_rows(run, start, want)
        assert _ber.decode_rows(run, start, got) == i, [m.hex() for m in run]
        for k in want:
            assert got[k].rows == want[k].rows, [m.hex() for m in run]
            assert got[k].slots == want[k].slots, [m.hex() for m in run]
        read += i - start
    assert read > 2_000  # rows read, not only declined (4,598 with this seed)


def test_the_row_readers_agree_on_the_reference_tests_shapes():
    """test_deref_rows.py's hostile cases and named shapes, alone and in runs."""
    named = [rows_t.GOOD, rows_t.entry(), rows_t.entry(rows_t.attr(b"uid", b"a" * 90)),
             rows_t._past_end(), *(b for _n, b in rows_t._hostile()), *_row_cuts()]  # fmt: skip
    for run in [[m] for m in named] + [[rows_t.GOOD, m, rows_t.GOOD] for m in named]:
        for learnt in (False, True):
            want, got = _row_shapes(learnt), _row_shapes(learnt)
            assert _ber.decode_rows(run, 0, got) == ldap_entry.read_rows(run, 0, want)
            assert got[7].rows == want[7].rows and got[7].slots == want[7].slots
    # A server sending ever new attribute types: the tables of spellings stay alike.
    run = [rows_t.entry(rows_t.attr(b"x%d" % i, b"v")) for i in range(200)]
    want, got = _row_shapes(False), _row_shapes(False)
    assert _ber.decode_rows(run, 0, got) == ldap_entry.read_rows(run, 0, want) == 200
    assert got[7].slots == want[7].slots and len(got[7].slots) == 64


_GUARD_SCRIPT = r"""
import ctypes, mmap, random, sys
from cached.ldap import _ber
from tests.unit import test_deref_rows as rows_t
from tests.unit.test_ber_c import _cut_inside, _damaged, _row_cuts, _row_message, _row_shapes
from tests.unit.test_deref_entries import GROUP, _hostile, attr, entry

PAGE = mmap.PAGESIZE
m = mmap.mmap(-1, 2 * PAGE)
window = (ctypes.c_char * (2 * PAGE)).from_buffer(m)
libc = ctypes.CDLL(None, use_errno=True)
libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
assert libc.mprotect(ctypes.addressof(window) + PAGE, PAGE, 0) == 0  # PROT_NONE
view = memoryview(m)
shapes = [GROUP, entry(attr(b"cn", b"ab"), attr(b"gidNumber", b"7")),
          entry(attr(b"cn", b"x" * 200), attr(b"description", b"y" * 300))]
msgs = [s[:cut] for s in shapes for cut in range(len(s) + 1)]
rng = random.Random(7)
msgs += [_damaged(rng, shapes[i % 3]) for i in range(20_000)]
msgs += [b for _n, b in _hostile()] + _cut_inside()
for msg in msgs:
    if len(msg) > PAGE:
        continue
    m[PAGE - len(msg) : PAGE] = msg  # flush against the page no read may touch
    got = _ber.decode_entry(view[PAGE - len(msg) : PAGE], {}, 64)
    assert got == _ber.decode_entry(msg, {}, 64), msg.hex()
rows = [rows_t.GOOD[:cut] for cut in range(len(rows_t.GOOD) + 1)]
rows += [b for _n, b in rows_t._hostile()] + [rows_t._past_end()] + _row_cuts()
rows += [_damaged(rng, _row_message(rng)) for _ in range(20_000)]
for msg in rows:
    m[PAGE - len(msg) : PAGE] = msg
    a, b = _row_shapes(False), _row_shapes(False)
    assert _ber.decode_rows([view[PAGE - len(msg) : PAGE]], 0, a) == _ber.decode_rows([msg], 0, b)
    assert a[7].rows == b[7].rows, msg.hex()
print(len(msgs) + len(rows))
"""


def test_the_c_reader_reads_no_octet_past_the_buffer():
    """Each message placed flush against an inaccessible page (a memoryview of an
    mmap whose next page is PROT_NONE): a read of one octet past the end kills the
    process with SIGSEGV, where a bytes object's trailing NUL would hide it. Every
    prefix of three shapes, 20,000 damaged messages, test_deref_entries' hostile ones and
    messages cut inside (_cut_inside); for the row reader, every prefix of a row,
    test_deref_rows' hostile ones and 20,000 damaged random rows."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    run = subprocess.run([sys.executable, "-c", _GUARD_SCRIPT], env=env,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])
    assert int(run.stdout) > 20_000


def test_each_request_lets_the_interned_values_go(tmp_path, monkeypatch):
    """LdapProvider._run clears the table at the end of every request, failed ones
    too: what a request interned is never held past it by the reader."""
    from cached.counters import Counters
    from cached.ldap import provider as prov
    from cached.ldap.exchange import LdapError
    from testing.backend import make_backend, make_domain

    cleared: list[int] = []
    monkeypatch.setattr(prov, "intern_clear", lambda: cleared.append(1))
    p, _cache, _ = make_backend(
        tmp_path, make_domain(["ldap://127.0.0.1:9"], "dc=example,dc=test"), Counters()
    )
    assert p._run("req_user", "user", "a", lambda _w: prov.Result(prov.Outcome.NOT_FOUND))
    assert cleared == [1]

    def fails(_w: object) -> prov.Result:
        raise LdapError("a server that went away")

    assert p._run("req_user", "user", "a", fails).outcome is prov.Outcome.ERROR
    assert cleared == [1, 1]
