"""Against real parts: slapd, glibc + libnss_sss in a mount namespace, dbus-daemon, Samba."""
