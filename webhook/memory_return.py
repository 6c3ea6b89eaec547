"""Memory freed after a large request goes back to the system, not to the allocator's free lists.

glibc's malloc serves an allocation of 128 KiB or more (the bytes, text and large strings of a
big request body) with its own mapping, unmapped when freed; but each time such a block is
freed it raises that threshold to the block's size, so the next 7 MiB body is carved from the
heap instead, and the heap keeps it once freed. It also gives each thread that allocates at once
an arena of its own, up to eight per core, each keeping its own free memory. Sixteen 7 MiB
reviews left a worker holding 240 MiB after they were answered; a worker that keeps what its
largest burst took is one burst closer to its container's memory limit for good.

``tune()`` fixes the threshold (which turns the raising off) and caps the arenas, as the
``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_ARENA_MAX`` environment variables would, from inside the
process: ``serve`` calls it before gunicorn forks, and the workers inherit it. Elsewhere than
glibc (musl returns memory on its own) it does nothing.
"""
from __future__ import annotations

import ctypes
import logging

log = logging.getLogger(__name__)

# mallopt(3) parameters.
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
# Blocks from this size up get their own mapping, returned to the system when freed. Small
# enough for a request body's buffers; large enough that ordinary requests never pay a mapping.
MMAP_THRESHOLD = 256 * 1024
# Two arenas: threads contend a little more on allocation, and free memory is kept in two
# places, not sixteen.
ARENA_MAX = 2


def tune() -> bool:
    """Set the allocator as the module docstring says; whether it could be (glibc only)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    applied = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_ARENA_MAX, ARENA_MAX))
    if not applied:
        log.warning("could not tune the memory allocator (mallopt refused): freed memory may stay with the process")
    return applied
