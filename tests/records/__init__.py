"""Record codec tests; kafka-python is the independent oracle.

Importing `kafka` loads its protocol schemas through a deprecated `importlib.resources` call, and
the suite turns warnings into errors; load it once here, with that one warning silenced, before
any test module imports from it.
"""

import warnings

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"importlib\.resources")
    warnings.filterwarnings(
        "ignore", message="read_text is deprecated", category=DeprecationWarning
    )
    import kafka  # noqa: F401
