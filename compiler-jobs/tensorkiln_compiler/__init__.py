"""Runs inside a CompileJob pod: compile, validate, benchmark and publish engines."""
