"""Load objects into a stopped Samba DC's sam.ldb with Samba's own Python bindings.

Run by :meth:`testing.addc.SambaDC.load` as ``/usr/bin/python3 addc_load.py SMB_CONF
DATA_JSON``: the system Python has python3-samba, the project's venv does not, so this
file imports nothing from the project. Going through SamDB's module stack (not raw ldb)
makes Samba assign objectSid, RIDs, primaryGroupID and the rest as ``samba-tool user
add`` would. A transaction per 500 objects: one for everything grows Samba's memory
with the directory, one per object is ~10x slower (measured on bigroupuser).
"""

import json
import sys

import ldb
from samba.auth import system_session
from samba.param import LoadParm
from samba.samdb import SamDB

BATCH = 500


def main() -> int:
    conf, data_path = sys.argv[1], sys.argv[2]
    lp = LoadParm()
    lp.load(conf)
    samdb = SamDB(url=lp.samdb_url(), session_info=system_session(), lp=lp)
    with open(data_path) as f:
        data = json.load(f)
    samdb.transaction_start()
    try:
        for n, e in enumerate(data["add"], 1):
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
