"""The test harness: real servers and clients started for a test, and what they must answer.

A real slapd (``slapd``) serving generated directories (``gendir``, ``zoo``), a real Samba
AD DC (``addc``, ``addir``), a real ``cached serve`` (``daemon``), glibc and libnss_sss in a
private mount namespace (``nsenv``, ``nssload``), a fault-injecting TCP proxy
(``faultproxy``), a process as another user (``asuser``, ``attacker``), backends on a test
slapd (``backend``) and process statistics (``procstat``). Used by ``tests/`` and by the
benchmarks of ``perf/``; not part of the installed package (pyproject.toml installs
``cached*`` only). Nothing here imports pytest except ``marks``, so benchmark scripts run
without it.
"""
