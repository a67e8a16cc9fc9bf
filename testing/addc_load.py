"""Load objects into a Samba DC with Samba's own Python bindings: a stopped DC's
sam.ldb, or users into a running one over ldapi.

Run by :meth:`testing.addc.SambaDC.load` as ``/usr/bin/python3 addc_load.py SMB_CONF
DATA_JSON``, or by :meth:`~testing.addc.SambaDC.add_users` with a third argument, the
running DC's ldapi URL (bound as the Administrator, ``admin_password`` in the data): the
system Python has python3-samba, the project's venv does not, so this file imports
nothing from the project. Going through SamDB's module stack (not raw ldb)
makes Samba assign objectSid, RIDs, primaryGroupID and the rest as ``samba-tool user
add`` would. A transaction per 500 objects: one for everything grows Samba's memory
with the directory, one per object is ~10x slower (measured on bigroupuser).

``users`` are made with passwords by the calls ``samba-tool user create``, ``user
disable`` and ``user setexpiry`` make (SamDB.newuser, disable_account, setexpiry), in
this one process: each samba-tool run pays Samba's Python start-up again.
"""

import json
import sys

import ldb
from samba.auth import system_session
from samba.credentials import Credentials
from samba.param import LoadParm
from samba.samdb import SamDB

BATCH = 500


def main() -> int:
    conf, data_path = sys.argv[1], sys.argv[2]
    lp = LoadParm()
    lp.load(conf)
    with open(data_path) as f:
        data = json.load(f)
    if len(sys.argv) > 3:
        creds = Credentials()
        creds.guess(lp)
        creds.set_username("Administrator")
        creds.set_password(data["admin_password"])
        samdb = SamDB(url=sys.argv[3], session_info=system_session(), credentials=creds, lp=lp)
    else:
        samdb = SamDB(url=lp.samdb_url(), session_info=system_session(), lp=lp)
    samdb.transaction_start()
    try:
        for n, e in enumerate(data.get("add", []), 1):
            samdb.add({"dn": e["dn"], **e["attrs"]})
            if n % BATCH == 0:
                samdb.transaction_commit()
                samdb.transaction_start()
        for m in data["modify"]:
            msg = ldb.Message(ldb.Dn(samdb, m["dn"]))
            for k, v in m["attrs"].items():
                msg[k] = ldb.MessageElement(v, ldb.FLAG_MOD_REPLACE, k)
            samdb.modify(msg)
    except BaseException:
        samdb.transaction_cancel()
        raise
    samdb.transaction_commit()
    for u in data.get("users", []):
        samdb.newuser(u["login"], u["password"], uidnumber=u["uid"], gidnumber=u["gid"],
                      loginshell=u["shell"], unixhome=u["home"],
                      force_password_change_at_next_login_req=u["must_change"])
        found = f"(&(objectClass=user)(sAMAccountName={u['login']}))"
        if u["disabled"]:
            samdb.disable_account(found)
        if u["expired"]:
            samdb.setexpiry(found, 0)  # accountExpires: now (samba-tool --days=0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
