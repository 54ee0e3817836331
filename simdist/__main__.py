"""``python -m simdist`` is the ``simdist`` command."""

import sys

from .cli import main

sys.exit(main())
