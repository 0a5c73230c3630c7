"""``python -m sparsefs`` is the ``sparsefs`` command."""

import sys

from sparsefs.cli import main

sys.exit(main())
