"""Save a GPO's files into the DC's SYSVOL over SMB and update its object over LDAP,
as the Group Policy editor saves a GPO, with Samba's own Python bindings.

Run by :func:`testing.adgpo.edit_gpo` as ``/usr/bin/python3 adgpo_edit.py DC_HOST
SMB_CONF`` inside the joined host's namespaces (its krb5.conf, its DNS): the system
Python has python3-samba, the project's venv does not, so this file imports nothing
from the project. The request (JSON) comes on standard input, the Administrator's
password with it, never in argv:

``{"password": …, "folder": "cached.test\\Policies\\{GUID}", "files": {relative
path: base64 bytes}, "dn": the GPO's DN, "replace": {attribute: value}}``

Files go through the DC's smbd, so they take the ACL SYSVOL's folders pass on (what
``samba-tool gpo create`` set), as an editor's do.
"""

import base64
import json
import sys

import ldb
from samba.credentials import Credentials
from samba.param import LoadParm
from samba.samba3 import libsmb_samba_internal as libsmb
from samba.samba3 import param as s3param
from samba.samdb import SamDB


def main() -> int:
    dc, conf = sys.argv[1], sys.argv[2]
    req = json.load(sys.stdin)
    lp = LoadParm()
    lp.load(conf)
    creds = Credentials()
    creds.guess(lp)
    creds.set_username("Administrator")
    creds.set_password(req["password"])
    creds.set_smb_signing(2)  # SMB_SIGNING_REQUIRED, as samba-tool gpo's connection
    s3_lp = s3param.get_context()
    s3_lp.load(conf)
    conn = libsmb.Conn(dc, "sysvol", lp=s3_lp, creds=creds)
    folder = req["folder"]
    for rel, data in req["files"].items():
        parts = rel.split("\\")
        for i in range(1, len(parts)):
            d = "\\".join([folder, *parts[:i]])
            if not conn.chkpath(d):
                conn.mkdir(d)
        conn.savefile("\\".join([folder, *parts]), base64.b64decode(data))
    if req.get("replace"):
        samdb = SamDB(url=f"ldap://{dc}", credentials=creds, lp=lp)
        msg = ldb.Message(ldb.Dn(samdb, req["dn"]))
        for k, v in req["replace"].items():
            msg[k] = ldb.MessageElement(v, ldb.FLAG_MOD_REPLACE, k)
        samdb.modify(msg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
