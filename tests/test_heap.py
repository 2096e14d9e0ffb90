"""memfit.heap: a serving process's header reads reuse their memory instead of faulting fresh pages in each time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tools.gguf_writers import gemma3_4b, write_model

FAULTS = """
import resource, sys
from memfit.heap import keep_heap
from memfit.readers.gguf_header import read_header
assert keep_heap()
read_header(sys.argv[1])
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(3):
    read_header(sys.argv[1])
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_large_header_read_again_faults_in_no_fresh_memory(tmp_path: Path) -> None:
    """A 262k-vocabulary header (6.4 MiB) read three more times in a process whose heap memfit.heap set: its
    buffers come from the memory the first read freed (glibc's defaults: about 2,350 page faults per read here)."""
    path = tmp_path / "gemma3-262k.gguf"
    write_model(gemma3_4b(), path)
    done = subprocess.run([sys.executable, "-c", FAULTS, str(path)], capture_output=True, text=True, check=True)
    assert int(done.stdout) < 3 * 64  # pages: the header alone is 1,640


ARENAS = """
import ctypes, sys, tempfile, threading
from memfit.heap import keep_heap
if sys.argv[1] == "kept":
    assert keep_heap()
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = (ctypes.c_void_p,)
together = threading.Barrier(8)
def allocate():
    together.wait()
    for _ in range(50):
        libc.free(libc.malloc(1 << 20))
threads = [threading.Thread(target=allocate) for _ in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
libc.fdopen.restype = ctypes.c_void_p
libc.fdopen.argtypes = (ctypes.c_int, ctypes.c_char_p)
libc.malloc_info.argtypes = (ctypes.c_int, ctypes.c_void_p)
libc.fclose.argtypes = (ctypes.c_void_p,)
fd, name = tempfile.mkstemp()
report = libc.fdopen(fd, b"w")
libc.malloc_info(0, report)
libc.fclose(report)
print(open(name).read().count("<heap nr="))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt and malloc_info")
def test_threads_that_allocate_together_share_the_capped_arenas() -> None:
    """Eight threads allocating at once: glibc's defaults give each its own arena (each then keeps up to the trim
    threshold free at its top); in a process memfit.heap set, they share memfit.heap.ARENAS."""

    def arenas(mode: str) -> int:
        done = subprocess.run([sys.executable, "-c", ARENAS, mode], capture_output=True, text=True, check=True)
        return int(done.stdout)

    assert arenas("kept") == 4
    assert arenas("defaults") > 4
