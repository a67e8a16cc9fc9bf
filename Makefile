# cached: the two set-up commands are `make demo` and `make test`.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: test unit demo bench soak lint deps clean compat

# _ber.c: `pip install -e` builds the C reader in place once; a change needs a rebuild.
$(STAMP): pyproject.toml cached/ldap/_ber.c
	test -x $(PY) || python3 -m venv $(VENV)
	@# gssapi builds against libkrb5-dev, which install-deps installs (as root).
	[ "$$(id -u)" != 0 ] || sh contrib/install-deps
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,perf]'
	touch $(STAMP)

deps: $(STAMP)
	sh contrib/install-deps
	@# The C reader (cached/ldap/_ber.c) is optional to pip, which skips it without gcc
	@# and python3-dev; install-deps has installed both now, so it is built here if the
	@# first install skipped it (tests/unit/test_ber_c.py fails without it).
	$(PY) -c 'import cached.ldap._ber' 2>/dev/null || $(PY) -m pip install -q --no-deps -e .
	@# SSSD 2.8.2 and ldb-tools, the oracle the PAM tests compare against: installed with
	@# service starts forbidden and its units left disabled (testing/install.py).
	$(PY) -m testing.install

# lint and unit need only the venv (no root, no apt); everything that starts slapd, dbus
# or libnss_sss also needs the Debian packages (contrib/install-deps, which runs apt when
# some are missing).
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# The pure-logic tests (tests/unit): no root, no slapd, no Debian packages.
unit: $(STAMP)
	$(VENV)/bin/pytest -q tests/unit

# On one worker per core (pytest-xdist): most tests wait on slapd, samba, sssd or the
# daemon, so two workers overlap. Each module runs whole on one worker, and the modules
# sharing a Samba DC on the same one (tests/conftest.py: pytest_xdist_make_scheduler).
test: deps lint
	$(VENV)/bin/pytest -q -n auto

bench: deps
	$(VENV)/bin/pytest -q tests/bench --benchmark-enable --benchmark-autosave \
	    --benchmark-columns=min,median,max,rounds
	$(PY) -m perf.run

soak: deps
	$(VENV)/bin/pytest -q -m slow -s -p no:cacheprovider

demo: deps
	$(PY) -m perf.demo

# The zoo (testing/zoo.py) and the PAM matrix (testing/pammatrix.py) through real
# SSSD 2.8.2 and cached; reports in perf/results/.
compat: deps
	$(PY) -m testing.compat
	$(PY) -m testing.pamcompat

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .benchmarks
