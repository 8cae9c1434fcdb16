import sys

from attnzoo.cli import main

sys.exit(main())
