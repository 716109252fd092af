"""`python -m runtime acls app.yaml`: the ACLs the app's principal needs, as `kafka-acls.sh` commands."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

from runtime.commands.running import command_parser, run
from runtime.config import load_app
from runtime.kafka.connection import configured_bootstrap
from runtime.kafka.permissions import Grant, Purpose, Resource, app_permissions, principal

PRINCIPAL = re.compile(r"^[A-Za-z]+:.+$")
UNNAMED_BROKER = "${KAFKA_BOOTSTRAP_SERVERS}"  # the shell fills it in where the YAML names no broker


def render(purposes: list[Purpose], principal_name: str, bootstrap: str) -> str:
    """A comment line per purpose, then its commands; a purpose's note, when it has one, says when to leave
    it out, and a grant only old brokers need is printed commented out."""
    lines = [
        f"# the ACLs of {principal_name}; run them as a principal allowed to alter ACLs (--command-config FILE)",
    ]
    for purpose in purposes:
        lines += ["", f"# {purpose.what}"]
        if purpose.note is not None:
            lines.append(f"# ({purpose.note})")
        commented = any("IdempotentWrite" in grant.operations for grant in purpose.grants)
        lines += [("# " if commented else "") + _command(grant, principal_name, bootstrap) for grant in purpose.grants]
    return "\n".join(lines)


def _command(grant: Grant, principal_name: str, bootstrap: str) -> str:
    words = ["kafka-acls.sh", "--bootstrap-server", bootstrap, "--add", "--allow-principal", principal_name]
    for operation in grant.operations:
        words += ["--operation", operation]
    if grant.resource is Resource.CLUSTER:
        words.append("--cluster")
    else:
        for name in grant.names:
            words += [f"--{grant.resource}", name]
    if grant.prefixed:
        words += ["--resource-pattern-type", "prefixed"]
    return " ".join(word if word == UNNAMED_BROKER else shlex.quote(word) for word in words)


def parser() -> argparse.ArgumentParser:
    parser = command_parser(
        "acls",
        "The ACLs the app needs on a cluster with an authorizer, as kafka-acls.sh commands: its consumer group, "
        "the topics it reads and writes, the topics it creates (changelogs, repartition topics, dead letters, "
        "positions, the singletons' election), its transactional ids under exactly-once, and what it reads of "
        "the cluster. Each group of commands starts with a comment saying what it is for. It connects to nothing.",
    )
    parser.add_argument("app", type=Path, help="the app's YAML file")
    parser.add_argument(
        "--principal",
        metavar="User:NAME",
        help="whom to allow (default: User:<kafka.security.sasl.username>, which the YAML must then name)",
    )
    parser.add_argument("--replay-jobs", action="store_true", help="also what `replay-jobs` needs")
    parser.add_argument("--rewind", action="store_true", help="also what `rewind` needs")
    return parser


def main(argv: list[str]) -> int:
    command = parser()
    args = command.parse_args(argv)
    if args.principal is not None and not PRINCIPAL.match(args.principal):
        command.error(f"--principal: '{args.principal}' is not TYPE:NAME (User:payments)")

    def body() -> int:
        app = load_app(args.app)
        allowed = args.principal or principal(app.kafka)
        if allowed is None:
            command.error("the YAML's kafka.security names no SASL user name: give --principal User:NAME")
        bootstrap = configured_bootstrap(app.kafka) or UNNAMED_BROKER
        print(render(app_permissions(app, args.replay_jobs, args.rewind), allowed, bootstrap))
        return 0

    return run(args.app, body)
