"""``python -m apps.cli``: the ``superbiz`` command."""

import sys

from apps.cli.main import main

sys.exit(main())
