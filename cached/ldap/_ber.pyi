# cached/ldap/_ber.c: entry.read_entry and entry.read_rows in C.
from cached.ldap.entry import RowShape

def decode_entry(
    buf: bytes, names: dict[bytes, str], names_max: int
) -> tuple[int, bytes, dict[str, list[bytes]]] | None: ...
def decode_rows(msgs: list[bytes], i: int, shapes: dict[int, RowShape]) -> int: ...
