"""A quiet local Spark session whose Python workers run this interpreter and see this repo."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
_LOG4J: Final = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def start_spark(cores: int, app_name: str = "diskless-bench") -> SparkSession:
    """`local[cores]`, UI and console progress off, errors-only logging, few shuffle partitions.

    Workers use `sys.executable` and get the repository root on PYTHONPATH, so they import the
    same `benchmarks` and `diskless` code as the driver.
    """
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    paths = [str(REPO_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    log_dir = Path(tempfile.gettempdir()) / "diskless-bench-spark"
    log_dir.mkdir(exist_ok=True)
    log_config = log_dir / "log4j2.properties"
    log_config.write_text(_LOG4J)
    # Driver JVM options only take effect at launch, hence spark-submit arguments.
    os.environ.setdefault(
        "PYSPARK_SUBMIT_ARGS",
        f"--driver-java-options -Dlog4j2.configurationFile={log_config} pyspark-shell",
    )

    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(max(2, cores)))
        .config("spark.default.parallelism", str(max(2, cores)))
        .config("spark.driver.memory", "2g")
        .config("spark.python.worker.reuse", "true")
        .config("spark.python.worker.faulthandler.enabled", "true")
        .config("spark.sql.execution.arrow.pyspark.enabled", "false")
        .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark
