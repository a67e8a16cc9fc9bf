"""Pure logic: no root, no slapd, no Debian packages (`make unit`)."""
