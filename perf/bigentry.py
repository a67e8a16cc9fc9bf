"""One huge entry from a real slapd: cached's read path against ldap3 2.9.1's.

    python -m perf.bigentry [--mb 8.5] [--reps 3] [--out FILE.json]

A user whose ``gecos`` is ``--mb`` megabytes is loaded with ``slapadd`` (no client
size limit on the way in) and read with ``LdapClient.search`` (1 MiB reads into a
MessageBuffer, cached/ldap/connection.py) and with ldap3's own ``Connection.search``
(4,096-byte reads, ``bytes +=``). Wall time of the whole search, decoding included.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import ldap3

from cached.ldap import client
from testing.backend import make_domain
from testing.slapd import Slapd

BASE = "dc=example,dc=test"


def ldif(mb: float) -> str:
    gecos = "g" * int(mb * 1_000_000)
    return (
        f"dn: {BASE}\nobjectClass: top\nobjectClass: dcObject\nobjectClass: organization\n"
        "dc: example\no: example\n\n"
        f"dn: ou=people,{BASE}\nobjectClass: top\nobjectClass: organizationalUnit\nou: people\n\n"
        f"dn: uid=big,ou=people,{BASE}\nobjectClass: top\nobjectClass: person\n"
        "objectClass: organizationalPerson\nobjectClass: inetOrgPerson\n"
        "objectClass: posixAccount\ncn: big\nsn: big\nuid: big\nuidNumber: 10001\n"
        f"gidNumber: 10000\nhomeDirectory: /home/big\ngecos: {gecos}\n\n"
    )


def read_big(c: client.LdapClient) -> float:
    start = time.perf_counter()
    [entry] = c.search(f"ou=people,{BASE}", "(uid=big)", ["uid", "gecos"])
    elapsed = time.perf_counter() - start
    assert len(entry.get("gecos")[0]) > 1_000_000
    return elapsed


def read_big_ldap3(c: ldap3.Connection) -> float:
    start = time.perf_counter()
    c.search(f"ou=people,{BASE}", "(uid=big)", attributes=["uid", "gecos"])
    elapsed = time.perf_counter() - start
    assert len(c.response[0]["raw_attributes"]["gecos"][0]) > 1_000_000
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=float, default=8.5)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bigentry-", dir="/tmp") as tmp:
        path = Path(tmp) / "big.ldif"
        path.write_text(ldif(args.mb))
        with Slapd(Path(tmp) / "slapd", path, BASE) as s:
            cfg = make_domain([s.uri], BASE, ldap_search_timeout=600)
            results: dict[str, list[float]] = {}
            for name in ("cached", "ldap3"):
                if name == "cached":
                    c = client.LdapClient(cfg)
                    c.connect()
                    results[name] = [read_big(c) for _ in range(args.reps)]
                    c.close()
                else:
                    lc = ldap3.Connection(ldap3.Server(s.uri), auto_bind=True, read_only=True,
                                          receive_timeout=600)  # fmt: skip
                    results[name] = [read_big_ldap3(lc) for _ in range(args.reps)]
                    lc.unbind()
                med = statistics.median(results[name])
                print(f"{name}: median {med:.3f} s of {args.reps} ({results[name]})", flush=True)
    if args.out:
        args.out.write_text(json.dumps({"mb": args.mb, "seconds": results}, indent=1))


if __name__ == "__main__":
    main()
