import platform
import sys

import pytest

from electric.allocator import keep_freed_memory


@pytest.mark.skipif(sys.platform != "linux" or platform.libc_ver()[0] != "glibc", reason="glibc malloc only")
def test_sets_glibc_thresholds_unless_the_environment_does(monkeypatch):
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    assert keep_freed_memory()
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "131072")
    assert not keep_freed_memory()
