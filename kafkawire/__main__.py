import sys

from kafkawire.cli import main

sys.exit(main())
