"""glibc's malloc, tuned for a long-running threaded process whose memory is mostly JSON parsed
and dropped (the informers, the reconciles). Both calls do nothing where the C library is not glibc.

- glibc gives threads that allocate at once arenas of their own, up to eight per core, and each
  keeps the pages freed in it: the operator's RSS grew with its thread count, not with what it
  holds. `limit_arenas` caps them (MALLOC_ARENA_MAX=2 is the usual setting for threaded Python
  services), before any thread starts.
- glibc returns freed memory to the system only from the top of a heap; `release_free`
  (malloc_trim) hands back every free page, so the burst of a thousand models converging does not
  stay in RSS for good. Called after each resync pass: cheap (milliseconds), and rare.
"""

import ctypes
import functools

M_ARENA_MAX = -8  # mallopt's parameter number (malloc.h)


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") else None


def limit_arenas(arenas: int = 2) -> None:
    if (libc := _glibc()) is not None:
        libc.mallopt(M_ARENA_MAX, arenas)


def release_free() -> None:
    if (libc := _glibc()) is not None:
        libc.malloc_trim(0)
