"""Starting a Spark session for the inspection jobs: local by default, any master by URL, with the
``commitlog`` and ``consumequeue`` sources registered and Spark's own log noise kept to errors."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"
LOG_CONFIG = Path(__file__).with_name("log4j2.properties")


class JavaMissing(RuntimeError):
    """Spark needs a Java runtime (17 or newer) and none was found."""


def java_home_hint() -> str | None:
    """Why Spark cannot start for want of Java, or None when a ``java`` is there."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return None
    if shutil.which("java"):
        return None
    return ("Spark needs Java 17 or newer and no `java` is on PATH (nor JAVA_HOME set). "
            "Install one (Debian/Ubuntu: apt install openjdk-17-jre-headless) or set JAVA_HOME.")


def start_session(master: str = DEFAULT_MASTER, app_name: str = "mqctl analyze",
                  conf: dict[str, str] | None = None) -> SparkSession:
    """A Spark session on ``master`` with our data sources registered. Python workers run this
    interpreter (so they import ``formats`` from the same install)."""
    hint = java_home_hint()
    if hint:
        raise JavaMissing(hint)
    from pyspark.sql import SparkSession

    from spark.sources import SOURCES

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    log_opt = f"-Dlog4j2.configurationFile=file:{LOG_CONFIG}"
    builder = (
        SparkSession.builder.master(master).appName(app_name)
        .config("spark.pyspark.python", sys.executable)
        .config("spark.pyspark.driver.python", sys.executable)
        .config("spark.driver.extraJavaOptions", log_opt)
        .config("spark.executor.extraJavaOptions", log_opt)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "8")  # store reports aggregate to small tables
        .config("spark.sql.session.timeZone", "UTC")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    for source in SOURCES:
        session.dataSource.register(source)
    return session
