"""PyInstaller's entry script: the same ``main`` as the ``specchat`` console script."""

import sys

from specchat.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
