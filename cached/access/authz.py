"""nslcd's ``pam_authz_search`` as an ``ldap_access_order`` rule: the filter with its
variables replaced by the login's values, each escaped as an assertion value (RFC 4515
§3, the caller's ``escape``), so that no value (a user name, a remote host the client
chose) can add to the filter. nslcd.conf(5): ``$username``, ``$service``, ``$ruser``,
``$rhost``, ``$tty``, ``$hostname``, ``$fqdn``, ``$domain``, ``$dn``, ``$uid``, each also
as ``${name}``; a value the login does not have is empty, as in nslcd."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from cached.config.parsers import AUTHZ_VARIABLE


def expand(template: str, values: Mapping[str, str], escape: Callable[[str], str]) -> str:
    """``template`` with each variable replaced by ``escape(value)``."""

    def one(m: re.Match[str]) -> str:
        return escape(values.get(m.group(1) or m.group(2), ""))

    return AUTHZ_VARIABLE.sub(one, template)
