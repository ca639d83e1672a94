import sys

from .submit import main

sys.exit(main())
