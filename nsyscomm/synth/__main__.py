"""python -m nsyscomm.synth OUTDIR: regenerate the samples."""

import sys

from nsyscomm.synth.samples import main

sys.exit(main())
