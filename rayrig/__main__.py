import sys

from rayrig.cli import main

sys.exit(main())
