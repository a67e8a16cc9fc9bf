# cached/ldap/_ber.c: deref.read_entry and deref.read_rows in C.
from cached.ldap.deref import RowShape

def decode_entry(
    buf: bytes, names: dict[bytes, str], names_max: int
) -> tuple[int, bytes, dict[str, list[bytes]]] | None: ...
def decode_rows(msgs: list[bytes], i: int, shapes: dict[int, RowShape]) -> int: ...
