"""Runs inside a CompileJob pod: compile, validate, benchmark and publish engines.

`tensorkiln-compile` (cli.py) runs pipeline.py: fetch -> inspection -> fingerprint -> data ->
candidates -> accuracy -> benchmark -> selection -> publish -> report.
"""

from tensorkiln_api import __version__

__all__ = ["__version__"]
