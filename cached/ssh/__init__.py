"""The SSH socket (``services = nss, ssh``): users' public keys for
``sss_ssh_authorizedkeys``."""
