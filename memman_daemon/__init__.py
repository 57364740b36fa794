"""The memman daemon.

The daemon is one event loop; its vector math (numpy) is small matrix-vector work, for which
a BLAS thread pool only adds contention with the loop and other processes on the machine.
Unless the environment says otherwise, BLAS libraries get one thread (set before numpy is
first imported).
"""

import os as _os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    _os.environ.setdefault(_var, "1")
