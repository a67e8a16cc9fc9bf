"""What a directory entry can make cached write: log lines and terminal output.

Directory data is chosen by whoever may write the directory (docs/threat-model.md,
"Directory entries"), often a user editing his own gecos. Through the real parts: a
slapd loaded with the small directory plus the entries below, ``cached serve``, glibc
and libnss_sss in a mount namespace, the ``cached`` command line.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cached.memcache.layout import SLOT_SIZE, encode_passwd
from testing.daemon import CachedDaemon
from testing.ldif import BASE, GROUPS, PEOPLE, b64, group_entry, user_entry
from testing.marks import requires_nss
from testing.nsenv import NssProbe
from testing.slapd import Dataset, LiveDirectory, Slapd

pytestmark = requires_nss

GRIN = "\U0001f600"  # F0 9F 98 80 in UTF-8
MALLORY_UID = 30080
# A gecos rewriting the terminal that prints it: a carriage return, an ANSI erase of
# the screen, an OSC setting the window title (ESC ] ... BEL).
CTRL_GECOS = "Bob\r\x1b[2J\x1b]0;owned\x07 Smith"
NL_GROUP = "evil\ngroup"
ESC_GROUP = "esc\x1b[31mred"


def forgeable_gecos(name: str, uid: int, gid: int) -> str:
    """A gecos that puts GRIN's 0xF0 at offset 3 of a slot of ``name``'s passwd record
    (the memory cache refuses such a record, mcfile.py's docstring)."""
    for pad in range(2 * SLOT_SIZE):
        gecos = "x" * pad + GRIN
        record = encode_passwd(name, "*", uid, gid, gecos, "/home/x", "")
        if 0xF0 in record[3::SLOT_SIZE]:
            return gecos
    raise AssertionError("no padding puts 0xF0 at a slot's offset 3")


def entries() -> str:
    mallory = forgeable_gecos("mallory", MALLORY_UID, 10000)
    return "\n".join([
        user_entry(f"uid=mallory,{PEOPLE}", MALLORY_UID, 10000, "mallory",
                   extra=f"gecos:: {b64(mallory.encode())}"),
        user_entry(f"uid=ctrl,{PEOPLE}", 30081, 10000, "ctrl",
                   extra=f"gecos:: {b64(CTRL_GECOS.encode())}"),
        named_group(f"gidNumber=30180,{GROUPS}", NL_GROUP, 30180),
        named_group(f"gidNumber=30181,{GROUPS}", ESC_GROUP, 30181),
    ])  # fmt: skip


def named_group(dn: str, name: str, gid: int) -> str:
    """A group of ctrl named ``name`` (base64: a name with control characters)."""
    entry = group_entry(dn, "placeholder", gid, [f"uid=ctrl,{PEOPLE}"])
    return entry.replace("cn: placeholder", f"cn:: {b64(name.encode())}")


@pytest.fixture(scope="module")
def slapd_untrusted(
    tmp_path_factory: pytest.TempPathFactory, small_2307bis: Dataset
) -> Iterator[LiveDirectory]:
    work = tmp_path_factory.mktemp("untrusted")
    ldif = work / "untrusted.ldif"
    ldif.write_text(small_2307bis.ldif.read_text().rstrip("\n") + "\n\n" + entries())
    with Slapd(work / "slapd", ldif, BASE) as server:
        yield LiveDirectory(slapd=server, expected=small_2307bis.expected)


def responder_lines(d: CachedDaemon) -> list[str]:
    return [line for line in d.log_text().splitlines() if "cached[nss:" in line]


# -- logs ------------------------------------------------------------------------------


LOOKUPS = 200


def test_a_record_the_memory_cache_refuses_is_logged_once(daemon_factory, slapd_untrusted):
    """mallory's passwd record is refused by the memory cache (a 0xF0 byte at a slot
    boundary), so libnss_sss finds nothing there and every lookup reaches the socket.
    An unprivileged client looping getpwnam made one store attempt and one log line per
    lookup (20,571 lines in 5 s); now the refusal is logged once, whatever the number
    of lookups, by name or uid, or through `id` (two getpwnam and a getpwuid)."""
    d = daemon_factory(slapd_untrusted)
    with NssProbe(d.pipes_dir, d.mc_dir) as probe:  # the memory cache first, as clients
        first = probe.call("getpwnam", "mallory")
        assert first.ok and first.value[2] == MALLORY_UID, first
        before = len(responder_lines(d))
        for i in range(LOOKUPS):
            a = probe.call("getpwnam", "mallory") if i % 2 else probe.call("getpwuid", MALLORY_UID)
            assert a.ok and a.value == first.value, a
        assert a.ok
    for _ in range(5):
        r = d.run_nss(["id", "mallory"])
        assert r.returncode == 0 and r.stdout.startswith(f"uid={MALLORY_UID}(mallory)"), r
    lines = responder_lines(d)
    refused = [line for line in lines if "not stored" in line]
    assert len(refused) == 1, refused[:5]
    assert "mallory" in refused[0] and "0xF0 at offset 3" in refused[0]
    # Nothing else is written per lookup either: 210 lookups, no line.
    assert lines[before:] == [], lines[before:][:5]


# -- terminal output -------------------------------------------------------------------


def raw_controls(text: str) -> list[str]:
    """The control characters in ``text`` other than the line ends print() writes."""
    return [ch for ch in text if (ord(ch) < 0x20 and ch != "\n") or 0x7F <= ord(ch) < 0xA0]


def test_cached_getent_escapes_control_characters(daemon_factory, slapd_untrusted):
    """A gecos with a carriage return, an ANSI erase and an OSC title sequence prints
    escaped, on one line: root running `cached getent` sees the bytes, its terminal
    does not act on them."""
    d = daemon_factory(slapd_untrusted)
    r = d.cli("getent", "passwd", "ctrl")
    assert r.returncode == 0, r.stderr
    assert raw_controls(r.stdout) == [], repr(r.stdout)
    assert r.stdout == ("ctrl:*:30081:10000:Bob\\r\\x1b[2J\\x1b]0;owned\\x07 Smith:/home/x:\n"), (
        repr(r.stdout)
    )
    r = d.cli("getent", "group", ESC_GROUP)
    assert (r.returncode, r.stdout) == (0, "esc\\x1b[31mred:*:30181:ctrl\n"), repr(r.stdout)
    assert r.stderr == ""
    r = d.cli("getent", "initgroups", "ctrl\x1b[2J")  # echoed keys are escaped too
    assert raw_controls(r.stdout + r.stderr) == [], repr(r.stdout + r.stderr)


def test_cached_id_escapes_control_characters(daemon_factory, slapd_untrusted):
    """`cached id` prints a newline inside a group name as ``\\n``: one line, whose
    fields cannot be forged by a group name."""
    d = daemon_factory(slapd_untrusted)
    r = d.cli("id", "ctrl")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("\n") == 1 and raw_controls(r.stdout) == [], repr(r.stdout)
    assert "30180(evil\\ngroup)" in r.stdout, repr(r.stdout)
    assert "30181(esc\\x1b[31mred)" in r.stdout, repr(r.stdout)
    r = d.cli("id", "nosuch\x1b]0;x\x07")
    assert r.returncode == 1 and raw_controls(r.stderr) == [], repr(r.stderr)
