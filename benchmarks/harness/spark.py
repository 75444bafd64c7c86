"""A quiet Spark session, local or on a standalone cluster, whose Python workers run this
interpreter and see this repo.

On a cluster, every worker host needs the same interpreter path (this virtual environment) and
this repository at the same path, and must reach the driver (set SPARK_LOCAL_IP, or make the
driver's host name resolve, as for any Spark driver); the executors' environment (S3
credentials, for example) is the workers' own.

The driver JVM's own console output (JVM warnings, Spark's start-up banner and its log) goes to
`spark-driver.log` in a temporary directory, not to the harness's terminal; errors still reach the
harness as Python exceptions.
"""

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


def start_spark(
    cores: int, app_name: str = "diskless-bench", master: str | None = None
) -> SparkSession:
    """`local[cores]`, or `cores` cores of the standalone cluster at `master` (spark://HOST:PORT);
    UI and console progress off, errors-only logging, few shuffle partitions.

    Workers use `sys.executable` and get the repository root on PYTHONPATH, so they import the
    same `benchmarks` and `diskless` code as the driver. On a cluster the session waits until
    executors with all `cores` have registered, so that the tasks spread over them.
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

    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    conf = (
        SparkConf()
        .setMaster(master or f"local[{cores}]")
        .setAppName(app_name)
        .set("spark.ui.enabled", "false")
        .set("spark.ui.showConsoleProgress", "false")
        .set("spark.sql.shuffle.partitions", str(max(2, cores)))
        .set("spark.default.parallelism", str(max(2, cores)))
        .set("spark.driver.memory", "2g")
        .set("spark.python.worker.reuse", "true")
        .set("spark.python.worker.faulthandler.enabled", "true")
        .set("spark.sql.execution.arrow.pyspark.enabled", "false")
        .set("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
    )
    if master is not None:
        conf.set("spark.cores.max", str(cores))
        conf.set("spark.scheduler.minRegisteredResourcesRatio", "1.0")
        conf.set("spark.scheduler.maxRegisteredResourcesWaitingTime", "120s")
    if SparkContext._active_spark_context is None:
        with (log_dir / "spark-driver.log").open("ab") as driver_log:
            gateway = launch_gateway(
                conf, popen_kwargs={"stdout": driver_log, "stderr": driver_log}
            )
        SparkContext(conf=conf, gateway=gateway)
    spark = SparkSession.builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
