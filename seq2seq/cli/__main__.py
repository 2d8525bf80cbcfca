"""`python -m seq2seq.cli ...`: the `crossalign` command without the console script."""

import sys

from seq2seq.cli import main

sys.exit(main())
