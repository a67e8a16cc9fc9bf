"""cached's tests: unit tests next to tests against real parts (slapd, libnss_sss, D-Bus)."""
