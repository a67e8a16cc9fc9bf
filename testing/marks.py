"""pytest marks over the harness (the one module of ``testing`` that imports pytest)."""

from __future__ import annotations

import pytest

from testing.nsenv import skip_reason

#: Mark for tests that run the real client (glibc + libnss_sss in a mount namespace).
requires_nss = pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")
