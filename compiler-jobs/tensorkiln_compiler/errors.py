"""Failures the compiler reports, each with a CamelCase reason and an exit code.

Exit 2 tells the Job's pod failure policy that the input is bad (retrying cannot help);
exit 1 is everything else, which the Job may retry.
"""

import re

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INVALID_INPUT = 2


class CompileError(Exception):
    """A failure with a machine-readable reason; the message names the field or file at fault."""

    exit_code = EXIT_FAILED

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


class InvalidInput(CompileError):
    """The spec, model or dataset is wrong: the same input would fail again."""

    exit_code = EXIT_INVALID_INPUT


class RuntimeMismatch(CompileError):
    """This image's runtime is not the one the serving target runs: an engine built here would be timed on
    something that will not serve it (api.serving_targets). Another image is needed, not a retry."""

    exit_code = EXIT_INVALID_INPUT

    def __init__(self, message: str):
        super().__init__("RuntimeMismatch", message)


class CompilerVersionMismatch(CompileError):
    """spec.compilerVersion names another release than this compiler's: the chart's compilerVersion and
    compilerImage disagree, so the engine's cache key would claim a build that did not make it."""

    exit_code = EXIT_INVALID_INPUT

    def __init__(self, message: str):
        super().__init__("CompilerVersionMismatch", message)


class TensorRTUnavailable(CompileError):
    """A GPU class asked for TensorRT but this pod cannot build with it; never falls back silently."""

    def __init__(self, message: str):
        super().__init__("TensorRTUnavailable", message)


ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# Lines that say where, not what: a traceback's, and OpenVINO's "Exception from src/...:117:".
NOT_THE_ERROR = re.compile(r"^(Traceback \(most recent call last\)|File \"|Exception from \S+:\d+:?$)")


# onnxruntime's "/onnxruntime_src/.../gather_elements.cc:150 void onnxruntime::core_impl(...) [with ...] ".
SOURCE_LOCATION = re.compile(r"\S+\.(?:cc|cpp|h|hpp):\d+:?\s+(?:[\w:<>~ *&]*::\w+\([^)]*\)(?:\s*\[with [^\]]*\])?\s+)?")


def first_line(error: BaseException, limit: int = 400) -> str:
    """The first line of a runtime's error that says what went wrong: no ANSI colour codes, no stack
    trace, no source locations or C++ signatures; the error's type when its message is empty."""
    lines = (line.strip() for line in ANSI_ESCAPE.sub("", str(error)).splitlines())
    meaningful = next((line for line in lines if line and not NOT_THE_ERROR.match(line)), "")
    return (SOURCE_LOCATION.sub("", meaningful) or type(error).__name__)[:limit]
