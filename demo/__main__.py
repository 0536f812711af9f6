"""``python -m demo --out models``: build the four demo bundles (see ``demo.build``)."""

import sys

from demo.build import main

sys.exit(main())
