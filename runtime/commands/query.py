"""`python -m runtime query app.yaml STORE KEY`: a key of a running app's store, asked of one of its workers."""

from __future__ import annotations

import argparse
import json
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from runtime.commands.cluster import CommandFailed
from runtime.commands.running import command_parser, run
from runtime.config import AppConfig, ConfigError, load_app

EPILOG = """\
Any worker answers: a key of a partition it does not own is asked of the worker that does. Exit status
0 with the answer as JSON (`found` says whether the key is in the store); 1 with the reason when no
worker could answer (the group is rebalancing, the partition is being restored, a worker is unreachable).
"""


def parser() -> argparse.ArgumentParser:
    parser = command_parser(
        "query",
        "A running app's store, read through its workers' query endpoints (the app's `queries:` section): "
        "one key's value, or the keys under a prefix or in a range, with the input offsets the answer reflects.",
        EPILOG,
    )
    parser.add_argument("app", type=Path, help="the app's YAML file")
    parser.add_argument("store", help="the store's name, as the YAML names it")
    parser.add_argument("key", nargs="?", help="the key as text, encoded with the store's key serde (JSON if not text)")
    parser.add_argument("--prefix", help="instead of KEY: every key that starts with PREFIX, over all partitions")
    parser.add_argument(
        "--from", dest="start", help="instead of KEY: every key from START (included), over all partitions"
    )
    parser.add_argument("--to", dest="end", help="instead of KEY: every key below END (with or without --from)")
    parser.add_argument(
        "--url", help="the worker to ask (default: worker 0 at queries.advertised_host or queries.host, health.port)"
    )
    return parser


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    ranges = {"prefix": args.prefix, "from": args.start, "to": args.end}
    asked = {name: value for name, value in ranges.items() if value is not None}
    if (args.key is None) == (not asked) or ("prefix" in asked and len(asked) > 1):
        parser().error("give a KEY, --prefix, or --from and/or --to: one of them")

    def body() -> int:
        app = load_app(args.app)
        status, answer = ask(query_url(app, args.url, args.store, args.key, asked), token(app))
        if status != 200:
            raise CommandFailed(str(answer.get("error", f"HTTP {status}")))
        print(json.dumps(answer, indent=2))
        return 0

    return run(args.app, body)


def query_url(app: AppConfig, url: str | None, store: str, key: str | None, keys: dict[str, str]) -> str:
    """The key's URL, or the keys' asked for by `keys`: `prefix`, or `from` and `to`."""
    queries, health = app.queries, app.health
    if queries is None or health is None:
        raise ConfigError("queries: the app serves no queries: add a queries section (and a health section)")
    base = (url or f"http://{queries.advertised(health.port)}").rstrip("/")
    path = f"{base}/stores/{urllib.parse.quote(store, safe='')}"
    if key is not None:
        return f"{path}/{urllib.parse.quote(key, safe='')}"
    return f"{path}?{urllib.parse.urlencode(keys)}"


def token(app: AppConfig) -> str | None:
    secret = app.queries.token if app.queries is not None else None
    return secret.get_secret_value() if secret is not None else None


def ask(url: str, bearer: str | None) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {bearer}"} if bearer is not None else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        try:
            return error.code, json.loads(error.read())
        except ValueError:
            return error.code, {"error": f"HTTP {error.code} {error.reason}"}
    except OSError as error:
        raise CommandFailed(f"cannot reach {url.partition('/stores/')[0]}: {error}") from error
    except ValueError as error:
        raise CommandFailed(f"{url}: the answer is not JSON ({error})") from error
