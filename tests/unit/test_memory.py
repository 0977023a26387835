"""tensorkiln.memory: glibc's malloc tuning, harmless to call (and a no-op off glibc)."""

import platform

from tensorkiln import memory


def test_arenas_capped_and_free_memory_released_where_glibc_runs():
    memory.limit_arenas()
    memory.release_free()
    if platform.libc_ver()[0] == "glibc":
        assert memory._glibc() is not None
