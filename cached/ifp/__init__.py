"""The D-Bus interface of the responder: SSSD's InfoPipe names, plus cached's admin calls.

``start_ifp(config, admin)`` (called by ``cached.responder.main.run_responder``) connects to
``[cached] dbus_address`` and owns ``org.freedesktop.sssd.infopipe``; ``close()`` on the
handle it returns ends it. The API (names, signatures, paths, errors) is in
``interfaces.py``; the calls themselves in ``dispatch.py``; the bus glue in
``service.py``; the bus policy in ``contrib/dbus/org.freedesktop.sssd.infopipe.conf``.
"""

from cached.ifp.paths import BUS_NAME, GROUPS_PATH, IFP_PATH, USERS_PATH
from cached.ifp.service import IfpHandle, start_ifp

__all__ = ["BUS_NAME", "GROUPS_PATH", "IFP_PATH", "USERS_PATH", "IfpHandle", "start_ifp"]
