import json
import os
from pathlib import Path

import pytest
import yaml

GOLDEN_DIR = Path(__file__).parent / "golden"


@pytest.fixture
def golden():
    """Compare an object with tests/golden/NAME.yaml (text: NAME as given); UPDATE_GOLDEN=1 rewrites the file."""

    def check(name: str, obj) -> None:
        if isinstance(obj, str):
            path, text = GOLDEN_DIR / name, obj
        else:
            path = GOLDEN_DIR / f"{name}.yaml"
            text = yaml.safe_dump(json.loads(json.dumps(obj)), sort_keys=False)
        if os.environ.get("UPDATE_GOLDEN") == "1":  # the only writer: a fixture never writes what it compares against
            path.write_text(text)
        assert path.exists(), f"{path} is missing; write it with UPDATE_GOLDEN=1, then inspect it"
        assert text == path.read_text(), f"{path} differs; inspect, then rerun with UPDATE_GOLDEN=1"

    return check
