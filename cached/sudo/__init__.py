"""The sudo responder: SSSD's sudo socket for ``libsss_sudo`` (sans-IO codec in
``protocol``, the choice of rules in ``rules``, the socket in ``server``)."""
