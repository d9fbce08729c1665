"""What ``tiered export`` and ``tiered import`` share: their SparkSession, and Spark's errors in one line.

Without ``-v`` a session these commands start keeps the JVM quiet (its log4j2 configuration is
``tiered/spark/log4j2-quiet.properties``: no log at all, no progress bar), and a failure of the Spark job is
reported as one line: the last Python exception of the traceback Spark carries (an error of the source or the
writer, raised in a Python worker), or Spark's own first line (``[PATH_NOT_FOUND] Path does not exist: ...``).
The whole text stays on the exception's cause, which ``-v`` prints with Spark's log.
"""

from __future__ import annotations

import os
import re
import sys
from importlib import resources
from typing import Any

from tiered.errors import TieredStorageError

# "module.Class: message", the last line of a Python traceback (Spark passes a worker's traceback on as text)
_PYTHON_ERROR = re.compile(r"^([A-Za-z_][\w.]*): (.*)$")
_TRACEBACK = "Traceback (most recent call last):"
_END_OF_MESSAGE = re.compile(r"^(\s+at |\s*SQLSTATE: |JVM stacktrace:|\s*$)")
_SQLSTATE = re.compile(r"\s*SQLSTATE: \w+\s*$")
_PROJECT_MODULES = ("tiered.", "local.")
_JAVA_ERROR = re.compile(r"^([a-z][\w.]*\.[A-Z]\w*): (.+)$")  # "java.io.IOException: No space left on device"


class SparkJobError(TieredStorageError):
    """A Spark job of export or import failed; the message is the one line that says why (the cause has Spark's
    whole text)."""


def is_spark_error(exc: BaseException) -> bool:
    """An exception that Spark (PySpark or its Py4J gateway) raised."""
    try:
        from py4j.protocol import Py4JError
        from pyspark.errors import PySparkException
    except ImportError:  # pragma: no cover - the commands import pyspark first
        return False
    return isinstance(exc, PySparkException | Py4JError)


def spark_error_summary(exc: BaseException) -> str:
    """The one line that says why a Spark job failed (module docstring)."""
    lines = str(exc).splitlines()
    start = max((i for i, line in enumerate(lines) if line.rstrip().endswith(_TRACEBACK)), default=None)
    if start is not None:
        for i in range(len(lines) - 1, start, -1):
            match = _PYTHON_ERROR.match(lines[i])
            if match is None or lines[i][:1].isspace():
                continue
            name, message = match.groups()
            rest = []
            for more in lines[i + 1:]:
                if _END_OF_MESSAGE.match(more):
                    break
                rest.append(more)
            text = " ".join(" ".join([message, *rest]).split())
            if name.startswith(_PROJECT_MODULES):
                return text  # the project's errors read as the CLI prints them elsewhere, without their class
            return f"{name.rsplit('.', 1)[-1]}: {text}"
    first = next((line for line in lines if line.strip()), "") or type(exc).__name__
    if first.startswith("An error occurred while calling"):  # Py4J's: the Java error and its causes follow
        causes = [line.split("Caused by: ", 1)[1] for line in lines if line.startswith("Caused by: ")]
        java = causes[-1] if causes else next((line[2:] for line in lines if line.startswith(": ")), "")
        match = _JAVA_ERROR.match(java.strip())
        if match is not None:  # the root cause, as "IOException: No space left on device"
            first = f"{match.group(1).rsplit('.', 1)[-1]}: {match.group(2)}"
    return " ".join(_SQLSTATE.sub("", first).split())


def spark_job_error(exc: BaseException) -> SparkJobError | None:
    """A Spark error as the command reports it (raise it ``from exc``); None for any other exception."""
    return SparkJobError(spark_error_summary(exc)) if is_spark_error(exc) else None


def session(master: str, app_name: str, quiet: bool = False) -> tuple[Any, bool]:
    """The active SparkSession, or a new one for ``master`` (on loopback when local; silent when ``quiet``); True
    when created here."""
    from pyspark.sql import SparkSession

    import tiered.spark

    active = SparkSession.getActiveSession()
    if active is not None:
        tiered.spark.register(active)
        return active, False
    conf = {"spark.sql.session.timeZone": "UTC"}
    if quiet:
        config = resources.files("tiered.spark").joinpath("log4j2-quiet.properties")
        conf["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile={config}"
        conf["spark.ui.showConsoleProgress"] = "false"
    if master.startswith("local"):
        spark = tiered.spark.local_session(master, app_name, **conf)
    else:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        builder = SparkSession.builder.master(master).appName(app_name)
        for key, value in conf.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        tiered.spark.register(spark)
    return spark, True
