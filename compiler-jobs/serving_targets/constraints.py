"""The pip constraints of a compiler image built for a serving target (build time only).

    python3 constraints.py constraints.txt serving_targets/24.10.txt > target-constraints.txt

The target's file pins the runtimes its Triton release serves with; every other line of
constraints.txt stays.
"""

import re
import sys
from pathlib import Path

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==")


def merged(base: str, target: str) -> str:
    def name(line: str) -> str | None:
        found = _NAME.match(line)
        return found[1].lower().replace("_", "-") if found else None

    pinned = {name(line) for line in target.splitlines()} - {None}
    kept = [line for line in base.splitlines() if name(line) not in pinned]
    return "\n".join([*kept, *target.splitlines()]) + "\n"


if __name__ == "__main__":
    sys.stdout.write(merged(Path(sys.argv[1]).read_text(), Path(sys.argv[2]).read_text()))
