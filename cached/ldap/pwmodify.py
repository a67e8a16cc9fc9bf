"""The Password Modify extended operation's request value (RFC 3062 §2), sans-IO:

    PasswdModifyRequestValue ::= SEQUENCE {
        userIdentity [0] OCTET STRING OPTIONAL,
        oldPasswd    [1] OCTET STRING OPTIONAL,
        newPasswd    [2] OCTET STRING OPTIONAL }

SSSD sends all three (``sdap_exop_modify_passwd_send``: the user's DN, the old and the
new password), with the password policy request control on the operation, so a
server with a password policy checks the new password's quality and says why it
refused it. The passwords are the bytes PAM was given.
"""

from __future__ import annotations

from cached.ldap.ber import SEQUENCE, BerError, header, tlv

PASSWD_MODIFY_OID = "1.3.6.1.4.1.4203.1.11.1"

_USER_IDENTITY = 0x80
_OLD_PASSWD = 0x81
_NEW_PASSWD = 0x82


def encode_request(user: str, old: bytes | None, new: bytes | None) -> bytes:
    """The request value; a field that is None is left out (an empty ``user`` too:
    the server then changes the bound identity's password)."""
    body = b""
    if user:
        body += tlv(_USER_IDENTITY, user.encode("utf-8"))
    if old is not None:
        body += tlv(_OLD_PASSWD, old)
    if new is not None:
        body += tlv(_NEW_PASSWD, new)
    return tlv(SEQUENCE, body)


def decode_request(value: bytes) -> tuple[str, bytes | None, bytes | None]:
    """(userIdentity, oldPasswd, newPasswd) of a request value, for tests and the
    fuzzer; BerError when it is not one."""
    tag, pos, end = header(value, 0, len(value))
    if tag != SEQUENCE or end != len(value):
        raise BerError("PasswdModifyRequestValue: not one SEQUENCE")
    fields: dict[int, bytes] = {}
    last = 0
    while pos < end:
        tag, a, b = header(value, pos, end)
        if tag not in (_USER_IDENTITY, _OLD_PASSWD, _NEW_PASSWD) or tag <= last:
            raise BerError(f"PasswdModifyRequestValue: unexpected tag {tag:#x}")
        fields[tag] = value[a:b]
        last, pos = tag, b
    user = fields.get(_USER_IDENTITY, b"").decode("utf-8")
    return user, fields.get(_OLD_PASSWD), fields.get(_NEW_PASSWD)
