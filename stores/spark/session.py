"""The Spark session the jobs share: Python workers run this interpreter, so they import this package."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from stores.spark.s3a import S3ASettings
from stores.spark.s3a_jars import s3a_jars

KAFKA_PACKAGE = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"
"""Spark's Kafka source; its version must equal pyspark's (pinned in the `spark` extra)."""

TOKEN_PROVIDER = "org.apache.spark:spark-token-provider-kafka-0-10_2.13"
TOKEN_PROVIDER_JAR = (
    "https://repo1.maven.org/maven2/org/apache/spark/spark-token-provider-kafka-0-10_2.13/4.0.0/"
    "spark-token-provider-kafka-0-10_2.13-4.0.0.jar"
)
"""The Kafka source depends on the token provider of its own version, which Maven Central lacks
for 4.2.0 (newest there: 4.0.0 and 4.1.0-preview1). It is excluded from resolution and the 4.0.0
jar is added by URL instead; the source uses only its config helpers, unchanged since."""


SECRET_OPTIONS = r"(?i)secret|password|token|access[.]key|url|jaas|keystore|key[.]password"


def spark_session(
    app_name: str, master: str | None = None, *, kafka: bool = False, object_store: S3ASettings | None = None
) -> SparkSession:
    """`master=None` leaves the master to spark-submit (or Spark's default, local[*]). With `object_store`
    the session reads `s3a://` paths (the connector's jars are resolved on first use) and its tasks reach
    the same store; the jars join the driver's classpath only when this call starts the JVM."""
    # The local SparkContext takes its workers' interpreter from the environment only.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    builder = (
        builder.config("spark.pyspark.python", sys.executable)
        .config("spark.pyspark.driver.python", sys.executable)
        .config("spark.ui.enabled", "false")
        # The Kafka source's and sink's options hold the SASL login (its password inline) and a client key's
        # PEM text: plans, logs and events show them redacted, as Spark does its own secrets.
        .config("spark.sql.redaction.options.regex", SECRET_OPTIONS)
        .config("spark.redaction.regex", SECRET_OPTIONS)
    )
    jars: list[str] = []
    if kafka:
        builder = builder.config("spark.jars.packages", KAFKA_PACKAGE).config("spark.jars.excludes", TOKEN_PROVIDER)
        jars.append(TOKEN_PROVIDER_JAR)
    if object_store is not None:
        jars.extend(str(jar) for jar in s3a_jars())
        for name, value in object_store.spark_conf().items():
            builder = builder.config(name, value)
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    return builder.getOrCreate()
