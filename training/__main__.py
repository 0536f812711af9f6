"""Entry point of `python -m training` and the `bertserve-train` console script."""

import sys

from training.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
