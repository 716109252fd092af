"""The Spark jobs' object store, from the environment boto3 reads: S3A's settings and the tasks' variables,
and what is said of it in a log line (never a secret)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from stores.object_url import ObjectUrl
from stores.spark.__main__ import object_store
from stores.spark.s3a import S3ASettings, spark_path
from stores.spark.session import SECRET_OPTIONS
from stores.spark.snapshot_place import SnapshotPlace

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
TOKEN = "FwoGZXIvYXdzEXAMPLESESSIONTOKEN"
LOCAL = {
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
    "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
    "AWS_SECRET_ACCESS_KEY": SECRET,
    "AWS_REGION": "eu-west-1",
    "HOME": "/root",
}


def test_the_environment_of_a_local_store_becomes_s3a_settings_and_the_tasks_variables() -> None:
    conf = S3ASettings.from_environment(LOCAL).spark_conf()
    assert conf == {
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9000",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.endpoint.region": "eu-west-1",
        "spark.hadoop.fs.s3a.access.key": "AKIDEXAMPLE",
        "spark.hadoop.fs.s3a.secret.key": SECRET,
        "spark.executorEnv.AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "spark.executorEnv.AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
        "spark.executorEnv.AWS_SECRET_ACCESS_KEY": SECRET,
        "spark.executorEnv.AWS_REGION": "eu-west-1",
    }


def test_the_s3_endpoint_and_the_newer_region_name_win_as_in_boto3() -> None:
    settings = S3ASettings.from_environment(
        {
            "AWS_ENDPOINT_URL": "https://elsewhere.example",
            "AWS_ENDPOINT_URL_S3": "https://s3.example",
            "AWS_DEFAULT_REGION": "us-west-2",
            "AWS_REGION": "eu-central-1",
        }
    )
    conf = settings.spark_conf()
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "https://s3.example"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "true"
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "eu-central-1"
    assert S3ASettings.from_environment({"AWS_DEFAULT_REGION": "us-west-2"}).region == "us-west-2"


def test_without_credentials_s3a_keeps_its_own_provider_chain() -> None:
    settings = S3ASettings.from_environment({"AWS_REGION": "eu-west-1"})
    conf = settings.spark_conf()
    assert not [name for name in conf if "key" in name or "credentials" in name]
    assert "spark.hadoop.fs.s3a.endpoint" not in conf  # AWS's own, for the region
    assert "provider chain" in settings.describe()


def test_a_session_token_takes_the_temporary_credentials_provider() -> None:
    conf = S3ASettings.from_environment({**LOCAL, "AWS_SESSION_TOKEN": TOKEN}).spark_conf()
    assert conf["spark.hadoop.fs.s3a.session.token"] == TOKEN
    assert conf["spark.hadoop.fs.s3a.aws.credentials.provider"].endswith("TemporaryAWSCredentialsProvider")
    assert conf["spark.executorEnv.AWS_SESSION_TOKEN"] == TOKEN


def test_what_is_said_of_the_settings_holds_no_secret_and_spark_redacts_the_settings_that_do() -> None:
    settings = S3ASettings.from_environment({**LOCAL, "AWS_SESSION_TOKEN": TOKEN})
    for said in (settings.describe(), repr(settings), str(settings)):
        assert SECRET not in said and TOKEN not in said
    assert "http://127.0.0.1:9000" in settings.describe() and "AKIDEXAMPLE" in settings.describe()
    holding_secrets = [name for name, value in settings.spark_conf().items() if value in (SECRET, TOKEN)]
    assert len(holding_secrets) == 4
    for name in holding_secrets:  # Spark shows these names' values as *********(redacted)
        assert re.search(SECRET_OPTIONS, name), name


def test_the_command_line_names_the_store_only_when_a_location_is_in_a_bucket(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, value in LOCAL.items():
        monkeypatch.setenv(name, value)
    assert object_store("/data/dump.parquet", "/snapshots/counts/first") is None
    assert capsys.readouterr().err == ""
    settings = object_store("/data/dump.parquet", "s3://snapshots/counts/first")
    assert settings == S3ASettings.from_environment(LOCAL)
    said = capsys.readouterr().err
    assert "object store at http://127.0.0.1:9000" in said
    assert SECRET not in said


def test_spark_reads_a_bucket_as_s3a_and_anything_else_as_given() -> None:
    assert spark_path("s3://dumps/balances/*.parquet") == "s3a://dumps/balances/*.parquet"
    assert spark_path("/data/balances.csv") == "/data/balances.csv"
    with pytest.raises(ValueError, match="no valid bucket"):
        spark_path("s3://Dumps/balances")


def test_a_snapshot_is_named_by_its_last_segment_under_its_location(tmp_path: Path) -> None:
    assert SnapshotPlace.of("s3://bucket/snapshots/counts/first") == SnapshotPlace(
        ObjectUrl("bucket", "snapshots/counts"), "first"
    )
    assert SnapshotPlace.of("s3://bucket/first/") == SnapshotPlace(ObjectUrl("bucket", ""), "first")
    assert SnapshotPlace.of(tmp_path / "counts" / "first") == SnapshotPlace(tmp_path / "counts", "first")
    with pytest.raises(ValueError, match="names a bucket, not a snapshot"):
        SnapshotPlace.of("s3://bucket")
