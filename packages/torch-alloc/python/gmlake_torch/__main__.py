"""python -m gmlake_torch: the command line (cli.py; --help lists the subcommands)."""
import sys

from .cli import main

sys.exit(main())
