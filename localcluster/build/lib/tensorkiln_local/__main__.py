"""`python -m tensorkiln_local`: the `tensorkiln-local` command."""

from tensorkiln_local.cli import main

main()
