"""How a Spark job reaches the object store the runtime keeps snapshots in, from the same environment
variables boto3 reads: Hadoop's S3A connector for the paths Spark itself reads (`s3://` given to it as
`s3a://`), and the variables themselves for the job's Python tasks, which read and write snapshot files
through the runtime's own client (stores/object_storage.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from stores.object_url import SCHEME, ObjectUrl

S3A_SCHEME = "s3a://"
PASSED_TO_TASKS = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_PROFILE",
)
"""What boto3 reads, passed to the executors' Python workers (as `spark.executorEnv.*`, which Spark
redacts where it shows its configuration)."""
TEMPORARY_CREDENTIALS = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"


@dataclass(frozen=True)
class S3ASettings:
    """The object store as the environment names it; without credentials S3A's own chain looks for them
    (an instance's or pod's role)."""

    endpoint: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    task_environment: Mapping[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def from_environment(cls, environment: Mapping[str, str]) -> S3ASettings:
        """As boto3 reads them: the S3 endpoint before the general one, `AWS_REGION` before the older name."""
        return cls(
            endpoint=environment.get("AWS_ENDPOINT_URL_S3") or environment.get("AWS_ENDPOINT_URL") or None,
            region=environment.get("AWS_REGION") or environment.get("AWS_DEFAULT_REGION") or None,
            access_key_id=environment.get("AWS_ACCESS_KEY_ID") or None,
            secret_access_key=environment.get("AWS_SECRET_ACCESS_KEY") or None,
            session_token=environment.get("AWS_SESSION_TOKEN") or None,
            task_environment={name: environment[name] for name in PASSED_TO_TASKS if environment.get(name)},
        )

    def spark_conf(self) -> dict[str, str]:
        """The session's settings: `spark.hadoop.fs.s3a.*` for the connector, `spark.executorEnv.*` for the tasks."""
        # Path-style addressing, as the runtime's client: every S3-compatible server takes it.
        hadoop = {"fs.s3a.path.style.access": "true"}
        if self.endpoint:
            hadoop["fs.s3a.endpoint"] = self.endpoint
            hadoop["fs.s3a.connection.ssl.enabled"] = str(not self.endpoint.startswith("http://")).lower()
        if self.region:
            hadoop["fs.s3a.endpoint.region"] = self.region
        if self.access_key_id and self.secret_access_key:
            hadoop["fs.s3a.access.key"] = self.access_key_id
            hadoop["fs.s3a.secret.key"] = self.secret_access_key
            if self.session_token:
                hadoop["fs.s3a.session.token"] = self.session_token
                hadoop["fs.s3a.aws.credentials.provider"] = TEMPORARY_CREDENTIALS
        conf = {f"spark.hadoop.{name}": value for name, value in hadoop.items()}
        conf.update({f"spark.executorEnv.{name}": value for name, value in self.task_environment.items()})
        return conf

    def describe(self) -> str:
        """For a log line: where, and whose key, never a secret."""
        endpoint = self.endpoint or "AWS's endpoint for the region"
        if self.access_key_id and self.secret_access_key:
            credentials = f"access key {self.access_key_id}" + (" with a session token" if self.session_token else "")
        else:
            credentials = "credentials from S3A's provider chain (an instance or pod role)"
        return f"object store at {endpoint}, region {self.region or 'unset'}, path-style, {credentials}"


def spark_path(location: str) -> str:
    """The path Spark reads: `s3://bucket/prefix` as `s3a://bucket/prefix`, anything else as given."""
    if not location.startswith(SCHEME):
        return location
    url = ObjectUrl.parse(location)  # refuses credentials in the URL and invalid buckets, as the runtime does
    return f"{S3A_SCHEME}{url.bucket}/{url.prefix}"
