"""Triton's ModelConfig protobuf message, without the rest of tritonclient.

The operator needs only this message type, to check and print config.pbtxt. Importing it the usual
way (`from tritonclient.grpc import model_config_pb2`) runs `tritonclient.grpc`'s package init, which
loads grpc and numpy: about 40 MB of the operator's resident memory for nothing it uses. The
generated module itself depends on protobuf alone, so it is loaded from tritonclient's installed
files under its own module name; a process that imports `tritonclient.grpc` later (the client
commands) gets this same module from `sys.modules`, so the message types are registered once.
"""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

MODULE = "tritonclient.grpc.model_config_pb2"


def _load() -> ModuleType:
    if MODULE in sys.modules:
        return sys.modules[MODULE]
    package = importlib.util.find_spec("tritonclient")  # finds the package without running its init
    if package is None or not package.submodule_search_locations:
        raise ImportError("tritonclient is not installed (it provides Triton's model config schema)")
    path = Path(package.submodule_search_locations[0]) / "grpc" / "model_config_pb2.py"
    spec = importlib.util.spec_from_file_location(MODULE, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE] = module
    spec.loader.exec_module(module)
    return module


model_config_pb2 = _load()
