"""glibc's malloc told to keep the memory a serving process reuses.

A header read allocates a few buffers of MiBs (a 262k-vocabulary header's bytes, the string walk's arrays), which
glibc maps afresh past its mmap threshold and gives back on free, or gives back from the heap's top past its trim
threshold: every read then pays a page fault per 4 KiB page (a 262k header's read: 2,354 faults, 8.1-10.3 ms against
3.4 ms with the memory kept, on this machine). With both thresholds fixed, the freed buffers stay in the heap for
the next read. Each of glibc's arenas (the threads that read headers: the index's, a request's) keeps at most
TRIM_THRESHOLD_BYTES free at its top.
"""

from __future__ import annotations

import ctypes

M_TRIM_THRESHOLD = -1  # <malloc.h>
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's own ceiling for its sliding threshold (DEFAULT_MMAP_THRESHOLD_MAX)
TRIM_THRESHOLD_BYTES = 32 << 20  # about 3x a 262k header read's buffers (9.4 MB)


def keep_heap() -> bool:
    """Fix glibc's mmap and trim thresholds; False where the C library has no mallopt (macOS) or refuses."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )
