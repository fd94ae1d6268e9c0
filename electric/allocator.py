"""glibc malloc, told what suits each process: training keeps what a step frees for the next step; a server
gives back what a burst freed once it is idle.

Training: keep the memory a training step frees for the next step, instead of giving it back to the kernel.

glibc's malloc returns a freed block to the kernel when it was mmap'ed (above the mmap threshold) or when the free
space at the top of the heap exceeds the trim threshold; the next step's allocation of the same size then faults
every page in again. Both thresholds move with the process's allocation history (glibc raises them as large
blocks are freed), so two runs of the same step can differ by 30,000 page faults a step - 10-15% of a `tiny`
fp32 step on 2 cores - depending only on what setup allocated before the loop. Fixing them makes the step's
(B, T, V)-sized temporaries reuse the heap from the first step on.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # blocks up to this size come from the heap (glibc's maximum on 64-bit)
TRIM_THRESHOLD = 256 << 20  # free heap kept at the top before any is returned to the kernel
USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")  # glibc's own environment variables


def _glibc():
    """glibc's libc (ctypes), or None off Linux/glibc."""
    if sys.platform != "linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def keep_freed_memory() -> bool:
    """Fix glibc malloc's mmap and trim thresholds for this process (Linux with glibc, unless the environment
    already sets them). True iff they were set."""
    libc = None if any(v in os.environ for v in USER_SETTINGS) else _glibc()
    if libc is None:
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def release_free_memory() -> bool:
    """Give the heap's free pages back to the kernel (glibc's malloc_trim): a server calls it once idle after a
    burst, so its resident memory comes back down. True iff memory was released."""
    libc = _glibc()
    return bool(libc.malloc_trim(0)) if libc is not None else False
