import sys

from beamsearch.cli import main

sys.exit(main())
