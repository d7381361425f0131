import sys

from driverless.cli import main

sys.exit(main())
