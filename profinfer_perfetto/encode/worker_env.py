"""The environment of the after-run write's forkserver (encode/units.py), imported there first,
before numpy: OpenBLAS, which numpy's import loads, is told to start no thread pool. The workers
use no BLAS, and the pool spun 0.12 s of CPU per write (2026-12-08: starting two workers took
0.25-0.33 CPU s so told, 0.37-0.42 not). Never imported by the recorder itself: its environment,
which a target it starts inherits, stays as it was."""

import os

os.environ["OPENBLAS_NUM_THREADS"] = "1"
