"""`python -m finegemm ...` (see finegemm/cli.py)."""
import sys

from finegemm.cli import main

if __name__ == "__main__":
    sys.exit(main())
