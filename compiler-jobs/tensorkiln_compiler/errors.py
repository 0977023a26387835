"""Failures the compiler reports, each with a CamelCase reason and an exit code.

Exit 2 tells the Job's pod failure policy that the input is bad (retrying cannot help);
exit 1 is everything else, which the Job may retry.
"""

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


class TensorRTUnavailable(CompileError):
    """A GPU class asked for TensorRT but this pod cannot build with it; never falls back silently."""

    def __init__(self, message: str):
        super().__init__("TensorRTUnavailable", message)
