"""Runs inside a CompileJob pod: compile, validate, benchmark and publish engines.

`tensorkiln-compile` (cli.py) runs pipeline.py: fetch -> inspection -> fingerprint -> data ->
candidates -> accuracy -> benchmark -> selection -> publish -> report.
"""

__version__ = "0.1.0"
