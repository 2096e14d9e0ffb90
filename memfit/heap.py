"""glibc's malloc told to keep the memory a serving process reuses.

A header read allocates a few buffers of MiBs (a 262k-vocabulary header's bytes, the string walk's arrays), which
glibc maps afresh past its mmap threshold and gives back on free, or gives back from the heap's top past its trim
threshold: every read then pays a page fault per 4 KiB page (a 262k header's read: 2,354 faults, 8.1-10.3 ms against
3.4 ms with the memory kept, on this machine). With both thresholds fixed, the freed buffers stay in the heap for
the next read. Each of glibc's arenas keeps at most TRIM_THRESHOLD_BYTES free at its top, so their number is
capped too: glibc gives each new thread that allocates its own arena, up to 8 per core (a server's worker threads,
the index's), which could keep 32 MiB each. Python's threads allocate under the GIL, but C code that releases it
(SQLite's queries) may contend for a shared arena: with ARENAS arenas a server's throughput at 8 clients was
0.90-1.01 of glibc's default in interleaved runs on this 2-core machine (2 arenas: 0.66-0.92), and its memory grew
0.5-1.6% under CI's load (default: 3.0-7.5%).
"""

from __future__ import annotations

import ctypes

M_TRIM_THRESHOLD = -1  # <malloc.h>
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's own ceiling for its sliding threshold (DEFAULT_MMAP_THRESHOLD_MAX)
TRIM_THRESHOLD_BYTES = 32 << 20  # about 3x a 262k header read's buffers (9.4 MB)
ARENAS = 4  # the main thread's and three the other threads share


def keep_heap() -> bool:
    """Fix glibc's mmap and trim thresholds and its number of arenas; False where the C library has no mallopt
    (macOS) or refuses. Called before any thread but the main one allocates: glibc reads the arenas' cap once,
    when the first thread needs an arena of its own."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    settings = {M_MMAP_THRESHOLD: MMAP_THRESHOLD_BYTES, M_TRIM_THRESHOLD: TRIM_THRESHOLD_BYTES, M_ARENA_MAX: ARENAS}
    return all([bool(mallopt(option, value)) for option, value in settings.items()])
