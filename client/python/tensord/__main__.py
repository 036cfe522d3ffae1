"""python -m tensord: the command line of the HTTP API (tensord/cli.py)."""
import sys

from .cli import main

sys.exit(main())
