"""`python -m stores.spark bootstrap|snapshot ...` (or the same arguments through spark-submit)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import get_args

from stores.layout import StoreKind
from stores.replication import BROKER_DEFAULT
from stores.snapshot import SnapshotError


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--app", required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--partitions", type=int, required=True, help="the store's (= its changelog's) partitions")
    parser.add_argument("--key-serde", default="msgpack")
    parser.add_argument("--value-serde", default="msgpack")
    parser.add_argument("--out", required=True, help="the snapshot directory; must be absent or empty")
    parser.add_argument("--master", default=None, help="e.g. local[2]; default: spark-submit's or local[*]")


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
    boot.add_argument("--path", required=True, help="files to read; for jdbc the JDBC URL")
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
    boot.add_argument(
        "--seed-changelog",
        metavar="TOPIC",
        help="also write the rows into the store's changelog (created if missing; must be empty), so the "
        "changelog stays the full truth (needs --bootstrap-servers)",
    )
    boot.add_argument(
        "--replication-factor",
        type=int,
        default=BROKER_DEFAULT,
        help="--seed-changelog: the replicas of a changelog it creates, as the app's "
        "internal_topics.replication_factor (default -1: the broker's default.replication.factor)",
    )
    boot.add_argument(
        "--topic-config",
        action="append",
        default=[],
        help="--seed-changelog: a config NAME=VALUE of a changelog it creates, as the app's internal_topics.configs",
    )
    boot.add_argument("--bootstrap-servers", help="Kafka, for --topic-offsets and --seed-changelog")
    _common(boot)

    snap = commands.add_parser("snapshot", help="build a store snapshot from its changelog topic")
    snap.add_argument("--bootstrap-servers", required=True)
    snap.add_argument("--topic", required=True, help="the store's changelog topic")
    snap.add_argument("--kind", choices=get_args(StoreKind), default="key_value", help="stores.<name>.kind in the YAML")
    _common(snap)
    return parser


def _split(columns: Sequence[str] | None) -> list[str] | None:
    """`--key-columns a,b` and `--key-column a --key-column b` mean the same."""
    if columns is None:
        return None
    return [name.strip() for item in columns for name in item.split(",") if name.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from stores.spark.session import spark_session

    try:
        if args.command == "bootstrap":
            from stores.spark.bootstrap import ChangelogSeed, bootstrap, read_source

            topic_offsets = None
            if (args.topic_offsets or args.seed_changelog) and not args.bootstrap_servers:
                raise ValueError("--topic-offsets and --seed-changelog need --bootstrap-servers")
            if args.topic_offsets and args.seed_changelog:
                raise ValueError("--topic-offsets and --seed-changelog exclude each other")
            seed = None
            if args.seed_changelog:
                seed = ChangelogSeed(
                    args.bootstrap_servers,
                    args.seed_changelog,
                    args.replication_factor,
                    _options(args.topic_config, "--topic-config"),
                )
            if args.topic_offsets:
                from stores.spark.snapshot import changelog_end_offsets

                # Before the source is read: the data then holds at least what the topic held.
                topic_offsets = (args.topic_offsets, changelog_end_offsets(args.bootstrap_servers, args.topic_offsets))
                if len(topic_offsets[1]) != args.partitions:
                    raise ValueError(
                        f"topic {args.topic_offsets} has {len(topic_offsets[1])} partitions, "
                        f"expected --partitions {args.partitions}"
                    )
            spark = spark_session(f"bootstrap {args.app}/{args.store}", args.master, kafka=seed is not None)
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
                )
            finally:
                spark.stop()
            manifest = boot.manifest
            covers = (
                f", covering {manifest.changelog_topic} up to {manifest.changelog_offsets}"
                if manifest.changelog_topic
                else ""
            )
            print(
                f"bootstrap {args.app}/{args.store}: {boot.rows_read} rows read, "
                f"{boot.rows_written} rows written to {args.out}{covers}"
            )
        else:
            from stores.spark.snapshot import snapshot

            spark = spark_session(f"snapshot {args.app}/{args.store}", args.master, kafka=True)
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
                )
            finally:
                spark.stop()
            print(
                f"snapshot {args.app}/{args.store}: {snap.records_read} changelog records read, "
                f"{snap.rows_written} rows written to {args.out}, offsets {snap.manifest.changelog_offsets}"
            )
    except (SnapshotError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
