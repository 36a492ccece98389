"""python -m nsyscomm.synth OUTDIR: regenerate the samples."""

import sys

from nsyscomm.synth.generate import main

sys.exit(main())
