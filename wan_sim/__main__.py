"""``python -m wan_sim``: see :mod:`wan_sim.cli`."""

import sys

from wan_sim.cli import main

sys.exit(main())
