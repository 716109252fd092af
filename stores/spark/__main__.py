"""`python -m stores.spark bootstrap|snapshot|repartition ...` (or the same arguments through spark-submit)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any, get_args

from pydantic import ValidationError

from stores.errors import StoreError
from stores.kafka_security import KafkaSecurity, Mechanism, Protocol
from stores.layout import StoreKind
from stores.object_url import SCHEME
from stores.replication import BROKER_DEFAULT
from stores.snapshot import Manifest
from stores.spark.changelog_seed import ChangelogSeed
from stores.spark.s3a import S3ASettings
from stores.spark.s3a_jars import S3AJarsUnavailable

# The secrets of --security-protocol's settings: from the environment, never on a command line `ps` shows.
SECRET_VARIABLES = {
    "KAFKA_SASL_PASSWORD": "the SASL password of --sasl-username",
    "KAFKA_KEY_PASSWORD": "the password of --key-file, when the key is encrypted",
    "KAFKA_OAUTH_CLIENT_SECRET": "the client secret of --oauth-client-id",
}


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--app", required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--partitions", type=int, required=True, help="the store's (= its changelog's) partitions")
    parser.add_argument("--key-serde", default="msgpack")
    parser.add_argument("--value-serde", default="msgpack")
    parser.add_argument(
        "--out", required=True, help="the snapshot's directory or s3://bucket/prefix/name; must be absent or empty"
    )
    parser.add_argument("--master", default=None, help="e.g. local[2]; default: spark-submit's or local[*]")


def _kafka_security(parser: argparse.ArgumentParser) -> None:
    """How the job reaches a secured cluster: the fields of the app YAML's `kafka.security`, as options."""
    group = parser.add_argument_group(
        "Kafka security",
        "as the app YAML's kafka.security (docs/configuration.md); secrets from the environment: "
        + ", ".join(f"{name} ({what})" for name, what in SECRET_VARIABLES.items()),
    )
    group.add_argument(
        "--security-protocol", choices=[p.value for p in Protocol], default="PLAINTEXT", help="kafka.security.protocol"
    )
    group.add_argument("--ca-file", help="kafka.security.tls.ca_file (PEM; default: the system's trust store)")
    group.add_argument("--cert-file", help="kafka.security.tls.cert_file: a client certificate for mutual TLS (PEM)")
    group.add_argument("--key-file", help="kafka.security.tls.key_file: its key (PKCS#8 PEM)")
    group.add_argument("--sasl-mechanism", choices=[m.value for m in Mechanism], help="kafka.security.sasl.mechanism")
    group.add_argument("--sasl-username", help="kafka.security.sasl.username (its password: KAFKA_SASL_PASSWORD)")
    group.add_argument("--oauth-token-endpoint", help="kafka.security.sasl.oauth.token_endpoint, for OAUTHBEARER")
    group.add_argument(
        "--oauth-client-id", help="kafka.security.sasl.oauth.client_id (its secret: KAFKA_OAUTH_CLIENT_SECRET)"
    )
    group.add_argument("--oauth-scope", help="kafka.security.sasl.oauth.scope")


def _present(fields: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in fields.items() if value is not None}


def security_of(args: argparse.Namespace) -> KafkaSecurity:
    """The options, and the secrets from the environment, as the `kafka.security` they stand for."""
    tls = _present(
        {
            "ca_file": args.ca_file,
            "cert_file": args.cert_file,
            "key_file": args.key_file,
            "key_password": os.environ.get("KAFKA_KEY_PASSWORD") if args.cert_file else None,
        }
    )
    oauth = (
        _present(
            {
                "token_endpoint": args.oauth_token_endpoint,
                "client_id": args.oauth_client_id,
                "client_secret": os.environ.get("KAFKA_OAUTH_CLIENT_SECRET"),
                "scope": args.oauth_scope,
            }
        )
        if args.sasl_mechanism == Mechanism.OAUTHBEARER
        else {}
    )
    sasl = _present(
        {
            "mechanism": args.sasl_mechanism,
            "username": args.sasl_username,
            "password": os.environ.get("KAFKA_SASL_PASSWORD") if args.sasl_username else None,
            "oauth": oauth or None,
        }
    )
    return KafkaSecurity.model_validate(
        _present({"protocol": args.security_protocol, "tls": tls or None, "sasl": sasl or None})
    )


def _seed_options(parser: argparse.ArgumentParser, needs: str) -> None:
    parser.add_argument(
        "--seed-changelog",
        metavar="TOPIC",
        help="also write the rows into the store's changelog (created if missing; must be empty), so the "
        f"changelog stays the full truth ({needs})",
    )
    parser.add_argument(
        "--replication-factor",
        type=int,
        default=BROKER_DEFAULT,
        help="--seed-changelog: the replicas of a changelog it creates, as the app's "
        "internal_topics.replication_factor (default -1: the broker's default.replication.factor)",
    )
    parser.add_argument(
        "--topic-config",
        action="append",
        default=[],
        help="--seed-changelog: a config NAME=VALUE of a changelog it creates, as the app's internal_topics.configs",
    )


def _options(pairs: Sequence[str], flag: str = "--option") -> dict[str, str]:
    options = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"{flag} takes NAME=VALUE, got '{pair}'")
        options[name] = value
    return options


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m stores.spark", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    boot = commands.add_parser("bootstrap", help="build a store snapshot from Parquet, CSV, JSON or a JDBC table")
    boot.add_argument("--source", choices=("parquet", "csv", "json", "jdbc"), required=True)
    boot.add_argument(
        "--path", required=True, help="files to read (a path, or s3://bucket/prefix with a glob); for jdbc the JDBC URL"
    )
    boot.add_argument("--key-column", "--key-columns", dest="key_columns", action="append", required=True)
    boot.add_argument("--value-column", "--value-columns", dest="value_columns", action="append")
    boot.add_argument(
        "--option", action="append", default=[], help="reader option NAME=VALUE (jdbc: dbtable=..., user=...)"
    )
    boot.add_argument(
        "--topic-offsets",
        metavar="TOPIC",
        help="a global store's topic, fed from the same data: its end offsets, taken before the source is "
        "read, go into the manifest, so the runtime reads only what came after (needs --bootstrap-servers)",
    )
    _seed_options(boot, "needs --bootstrap-servers")
    boot.add_argument("--bootstrap-servers", help="Kafka, for --topic-offsets and --seed-changelog")
    _common(boot)
    _kafka_security(boot)

    snap = commands.add_parser("snapshot", help="build a store snapshot from its changelog topic")
    snap.add_argument("--bootstrap-servers", required=True)
    snap.add_argument("--topic", required=True, help="the store's changelog topic")
    snap.add_argument("--kind", choices=get_args(StoreKind), default="key_value", help="stores.<name>.kind in the YAML")
    _common(snap)
    _kafka_security(snap)

    repart = commands.add_parser(
        "repartition", help="write a key-value store's snapshot at another partition count, for the same app"
    )
    repart.add_argument(
        "--snapshot",
        required=True,
        help="the snapshot to read, a directory or s3://bucket/prefix/name (its manifest says the rest)",
    )
    repart.add_argument("--partitions", type=int, required=True, help="the app's new partition count")
    repart.add_argument(
        "--input-key-serde",
        help="the key serde of the topic the store's processor reads (its repartition.key_serde when it "
        "repartitions); default: the store's key serde. Keys are placed where that topic's producer puts them",
    )
    repart.add_argument(
        "--out", required=True, help="the new snapshot's directory or s3://bucket/prefix/name; must be absent or empty"
    )
    repart.add_argument("--master", default=None, help="e.g. local[2]; default: spark-submit's or local[*]")
    repart.add_argument("--bootstrap-servers", help="Kafka, for --seed-changelog")
    _seed_options(repart, "created with --partitions partitions; needs --bootstrap-servers")
    _kafka_security(repart)
    return parser


def _seed(args: argparse.Namespace) -> ChangelogSeed | None:
    if not args.seed_changelog:
        return None
    if not args.bootstrap_servers:
        raise ValueError("--seed-changelog needs --bootstrap-servers")
    return ChangelogSeed(
        args.bootstrap_servers,
        args.seed_changelog,
        args.replication_factor,
        _options(args.topic_config, "--topic-config"),
    )


def _split(columns: Sequence[str] | None) -> list[str] | None:
    """`--key-columns a,b` and `--key-column a --key-column b` mean the same."""
    if columns is None:
        return None
    return [name.strip() for item in columns for name in item.split(",") if name.strip()]


def _covers(manifest: Manifest) -> str:
    if not manifest.changelog_topic:
        return ""
    return f", covering {manifest.changelog_topic} up to {manifest.changelog_offsets}"


def object_store(*locations: str | None) -> S3ASettings | None:
    """The object store the environment names (as for boto3), when a location is in a bucket."""
    if not any(location and location.startswith(SCHEME) for location in locations):
        return None
    settings = S3ASettings.from_environment(os.environ)
    print(f"s3:// locations: {settings.describe()}", file=sys.stderr)
    return settings


def _repartition(args: argparse.Namespace, security: KafkaSecurity) -> None:
    from stores.spark.repartition import repartition
    from stores.spark.session import spark_session

    seed = _seed(args)
    spark = spark_session(
        f"repartition {args.snapshot}",
        args.master,
        kafka=seed is not None,
        object_store=object_store(args.snapshot, args.out),
    )
    try:
        moved = repartition(
            spark,
            snapshot_dir=args.snapshot,
            partitions=args.partitions,
            out=args.out,
            input_key_serde=args.input_key_serde,
            seed=seed,
            security=security,
        )
    finally:
        spark.stop()
    manifest = moved.manifest
    print(
        f"repartition {manifest.app}/{manifest.store}: {moved.rows_read} rows read, {moved.rows_written} rows "
        f"written to {args.out} at {manifest.partitions} partitions{_covers(manifest)}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from stores.spark.session import spark_session

    try:
        try:
            security = security_of(args)
        except ValidationError as error:  # its own text would show the values, secrets among them
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'kafka.security'}: {e['msg']}" for e in error.errors()
            )
            raise ValueError(f"the Kafka security options: {problems}") from None
        if args.command == "bootstrap":
            from stores.spark.bootstrap import bootstrap, read_source

            topic_offsets = None
            if (args.topic_offsets or args.seed_changelog) and not args.bootstrap_servers:
                raise ValueError("--topic-offsets and --seed-changelog need --bootstrap-servers")
            if args.topic_offsets and args.seed_changelog:
                raise ValueError("--topic-offsets and --seed-changelog exclude each other")
            seed = _seed(args)
            if args.topic_offsets:
                from stores.spark.snapshot import changelog_end_offsets

                # Before the source is read: the data then holds at least what the topic held.
                topic_offsets = (
                    args.topic_offsets,
                    changelog_end_offsets(args.bootstrap_servers, args.topic_offsets, security),
                )
                if len(topic_offsets[1]) != args.partitions:
                    raise ValueError(
                        f"topic {args.topic_offsets} has {len(topic_offsets[1])} partitions, "
                        f"expected --partitions {args.partitions}"
                    )
            spark = spark_session(
                f"bootstrap {args.app}/{args.store}",
                args.master,
                kafka=seed is not None,
                object_store=object_store(args.path, args.out),
            )
            try:
                frame = read_source(spark, args.source, args.path, _options(args.option))
                boot = bootstrap(
                    spark,
                    frame,
                    key_columns=_split(args.key_columns) or [],
                    value_columns=_split(args.value_columns),
                    app=args.app,
                    store=args.store,
                    partitions=args.partitions,
                    key_serde=args.key_serde,
                    value_serde=args.value_serde,
                    out=args.out,
                    topic_offsets=topic_offsets,
                    seed=seed,
                    security=security,
                )
            finally:
                spark.stop()
            print(
                f"bootstrap {args.app}/{args.store}: {boot.rows_read} rows read, "
                f"{boot.rows_written} rows written to {args.out}{_covers(boot.manifest)}"
            )
        elif args.command == "repartition":
            _repartition(args, security)
        else:
            from stores.spark.snapshot import snapshot

            spark = spark_session(
                f"snapshot {args.app}/{args.store}", args.master, kafka=True, object_store=object_store(args.out)
            )
            try:
                snap = snapshot(
                    spark,
                    bootstrap_servers=args.bootstrap_servers,
                    topic=args.topic,
                    app=args.app,
                    store=args.store,
                    partitions=args.partitions,
                    key_serde=args.key_serde,
                    value_serde=args.value_serde,
                    out=args.out,
                    kind=args.kind,
                    security=security,
                )
            finally:
                spark.stop()
            print(
                f"snapshot {args.app}/{args.store}: {snap.records_read} changelog records read, "
                f"{snap.rows_written} rows written to {args.out}, offsets {snap.manifest.changelog_offsets}"
            )
    except (StoreError, S3AJarsUnavailable, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
