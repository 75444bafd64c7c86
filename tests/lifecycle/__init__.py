"""Object lifecycle tests: file manager, retention scheduler, and failure races.

Importing `kafka` loads its protocol schemas through deprecated `importlib.resources` calls, and
the suite turns warnings into errors; load it once here with those warnings silenced.
"""

import warnings

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka  # noqa: F401
