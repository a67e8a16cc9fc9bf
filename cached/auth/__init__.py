"""Password authentication that is not LDAP: the SHA-512-crypt hash of cached
credentials (``shacrypt``) and the rules of offline authentication (``offline``).
Pure code: no sockets, no stores, no clocks of its own."""
