"""``python -m sparsefs`` is the ``sparsefs`` command."""

import sys

from sparsefs.app.cli import main

sys.exit(main())
