"""SHA-512-crypt against the known answers of Drepper's specification and against
``openssl passwd -6`` (the same algorithm as glibc's crypt(3))."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from cached.auth import shacrypt

# From https://www.akkadia.org/drepper/SHA-crypt.txt, the SHA-512 test vectors.
SPEC = [
    ("$6$saltstring", b"Hello world!",
     "$6$saltstring$svn8UoSVapNtMuq1ukKS4tPQd8iKwSMHWjl/O817G3uBnIFNjnQJuesI68u4OTLiBFdcbYEdF"
     "CoEOfaS35inz1"),
    ("$6$rounds=10000$saltstringsaltstring", b"Hello world!",
     "$6$rounds=10000$saltstringsaltst$OW1/O6BYHV6BcXZu8QVeXbDWra3Oeqh0sbHbbMCVNSnCM/UrjmM0Dp8"
     "vOuZeHBy/YTBmSK6H9qs/y3RnOaw5v."),
    ("$6$rounds=5000$toolongsaltstring", b"This is just a test",
     "$6$rounds=5000$toolongsaltstrin$lQ8jolhgVRVhY4b5pZKaysCLi0QBxGoNeKQzQ3glMhwllF7oGDZxUhx"
     "1yxdYcz/e1JSbq3y6JMxxl8audkUEm0"),
    ("$6$rounds=1400$anotherlongsaltstring",
     b"a very much longer text to encrypt.  This one even stretches over morethan one line.",
     "$6$rounds=1400$anotherlongsalts$POfYwTEok97VWcjxIiSOjiykti.o/pQs.wPvMxQ6Fm7I6IoYN3CmLs66x"
     "9t0oSwbtEW7o7UmJEiDwGqd8p4ur1"),
    ("$6$rounds=10$roundstoolow", b"the minimum number is still observed",
     "$6$rounds=1000$roundstoolow$kUMsbe306n21p9R.FRkW3IGn.S9NPN0x50YhH1xhLsPuWGsUSklZt58jaTfF4"
     "ZEQpyUNGc0dqbpBYYBaHHrsX."),
]  # fmt: skip


@pytest.mark.parametrize(("setting", "password", "expected"), SPEC)
def test_the_specification_vectors(setting: str, password: bytes, expected: str) -> None:
    salt, rounds = shacrypt.parse(setting + "$")
    assert shacrypt.sha512_crypt(password, salt, rounds) == expected
    assert shacrypt.verify(password, expected)
    assert not shacrypt.verify(password + b"!", expected)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl")
@pytest.mark.parametrize(
    ("password", "salt"),
    [("secret", "abcdefgh"), ("a", "s"), ("x" * 200, "0123456789abcdef"), ("pässwörd", "./AZ09")],
)
def test_as_openssl_passwd_6(password: str, salt: str) -> None:
    out = subprocess.run(
        ["openssl", "passwd", "-6", "-salt", salt, "-stdin"],
        input=password + "\n", capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert shacrypt.sha512_crypt(password.encode(), salt) == out


def test_new_hashes_have_a_fresh_16_character_salt() -> None:
    a, b = shacrypt.new_hash(b"pw"), shacrypt.new_hash(b"pw")
    assert a != b
    for h in (a, b):
        salt, rounds = shacrypt.parse(h)
        assert len(salt) == 16 and rounds is None
        assert shacrypt.verify(b"pw", h)


def test_other_formats_never_verify() -> None:
    assert not shacrypt.verify(b"pw", "")
    assert not shacrypt.verify(b"pw", "$1$abc$def")
    assert not shacrypt.verify(b"pw", "$6$nodigest")
