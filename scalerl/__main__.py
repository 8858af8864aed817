import sys

from scalerl.cli import main

sys.exit(main())
