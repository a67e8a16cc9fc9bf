# cached/ldap/_ber.c: entry.read_entry and entry.read_rows in C.
from collections.abc import Callable, Sequence

from cached.ldap.entries import Member, MemberKind
from cached.ldap.entry import RowShape
from cached.ldap.exchange import Row

def decode_entry(
    buf: bytes, names: dict[bytes, str], names_max: int, interned: frozenset[str] | None = ...
) -> tuple[int, bytes, dict[str, list[bytes]]] | None: ...
def decode_rows(msgs: list[bytes], i: int, shapes: dict[int, RowShape]) -> int: ...
def key_new(
    lists: list[Sequence[bytes]],
    memo: dict[bytes, str],
    spelled: dict[str, str],
    aliases: tuple[bytes, ...],
) -> tuple[list[bytes], list[list[str]]] | None: ...
def group_fields(
    attrs: dict[str, list[bytes]],
    spec: tuple[str, str | None, str, str, bytes, bytes, frozenset[str] | None],
) -> tuple[list[str] | None, int | None, bool, str, str, bool, bool]: ...
def name_rows(
    hits: list[str],
    swept: dict[str, Row],
    lo: int,
    hi: int,
    known: dict[str, Member | None],
    member_type: type[Member],
    kind: MemberKind,
    slow: Callable[[Row], Member | None],
) -> None: ...
def frames(buf: bytearray, limit: int) -> tuple[list[bytes], int, int]: ...
def intern_clear() -> None: ...
