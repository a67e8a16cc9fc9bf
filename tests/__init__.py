"""cached's tests: unit/ (pure logic), integration/ (real slapd, libnss_sss, D-Bus, Samba),
soak/ (the long runs, marked slow), bench/ (pytest-benchmark). The harness is testing/."""
