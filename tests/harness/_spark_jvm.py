"""The JVMs of the Spark tests start quick: the client compiler only, and the serial collector.

Every JVM of these tests lives for seconds to a minute and runs tiny jobs, on a machine that may
have two cores for everything: HotSpot's optimizing compiler (C2) and the parallel collector's
threads mostly compete for those cores with the brokers and Python workers under test, and
their code is never run long enough to pay back. The options change nothing Spark does; they
reach each kind of JVM by the way Spark launches it:

- `spark-class`'s own launcher: SPARK_LAUNCHER_OPTS;
- a driver (`spark-submit`, which pyspark runs): SPARK_SUBMIT_OPTS;
- a standalone master and its workers: SPARK_DAEMON_JAVA_OPTS;
- a standalone cluster's executors: `spark.executor.extraJavaOptions`, in the
  `spark-defaults.conf` of SPARK_CONF_DIR, which the driver reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

QUICK_JVM_OPTIONS: Final = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def quick_jvm_env(conf_dir: Path) -> dict[str, str]:
    """The environment (to add to a driver's and a cluster's daemons') that starts every JVM of
    a test with `QUICK_JVM_OPTIONS`; `conf_dir` is created to hold the Spark configuration."""
    conf_dir.mkdir(parents=True, exist_ok=True)
    (conf_dir / "spark-defaults.conf").write_text(
        f"spark.executor.extraJavaOptions {QUICK_JVM_OPTIONS}\n"
    )
    return {
        "SPARK_LAUNCHER_OPTS": QUICK_JVM_OPTIONS,
        "SPARK_SUBMIT_OPTS": QUICK_JVM_OPTIONS,
        "SPARK_DAEMON_JAVA_OPTS": QUICK_JVM_OPTIONS,
        "SPARK_CONF_DIR": str(conf_dir),
    }
