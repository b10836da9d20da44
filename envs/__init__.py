"""Re-export of :mod:`densereward.envs` for scripts run from the repository root (not installed).

New code imports ``densereward.envs`` (``pip install densereward[robotics]``); see envs/README.md.
"""

from densereward.envs import *  # noqa: F403
from densereward.envs import __all__  # noqa: F401
