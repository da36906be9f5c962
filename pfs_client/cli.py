"""python -m pfs_client: run recipes and adaptive analyses, follow rounds, export releases.

Exit codes: 0 done; 2 bad input (an unreadable or invalid JSON file, a usage error, a missing
token, a wrong password or unknown token (a 401), or a 400 from the server, whose field messages
are printed); 1 anything else (a failed or cancelled round, a server or connection error).
Messages go to stderr; results to stdout.
"""

from __future__ import annotations

import argparse
import getpass
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from pfs_client import __version__
from pfs_client.client import DEFAULT_URL, Client, load_json
from pfs_client.errors import ApiError, AuthenticationError, PfsError
from pfs_client.models import AdaptiveRun, Release, Round, write_text

PROG = "python -m pfs_client"
SHOWN_NGRAMS = 10  # per level in the summary; the run's JSON lists them all


class BadInput(Exception):
    """The user's input is wrong before anything reaches the server: exit code 2."""


def main(argv: Sequence[str] | None = None, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    out, err = stdout or sys.stdout, stderr or sys.stderr
    parser = _parser()
    args = parser.parse_args(argv)  # a usage error exits with 2, argparse's convention and ours
    # The connection options are SUPPRESSed (so a command's parser cannot overwrite them): fill them in.
    for name, default in (("url", None), ("token", None), ("request_timeout", 30.0)):
        if not hasattr(args, name):
            setattr(args, name, default)
    try:
        return args.handler(args, out, err)
    except BadInput as problem:
        print(f"pfs: {problem}", file=err)
        return 2
    except AuthenticationError as error:  # a wrong password or token: what was typed, as a missing token
        print(f"pfs: not signed in: {error.summary}", file=err)
        return 2
    except ApiError as error:
        # The one field's message in full on the first line ("recipeIdentifier: A recipe 'ages'
        # already exists in this analysis."), or the server's detail and a line per field.
        if error.status == 400:
            print(f"pfs: the server refused the input, nothing was changed: {error.summary}", file=err)
        else:
            print(f"pfs: HTTP {error.status} {error.code}: {error.summary}", file=err)
        for message in error.details():
            print(f"  {message}", file=err)
        return 2 if error.status == 400 else 1
    except PfsError as error:
        print(f"pfs: {error}", file=err)
        return 1
    except OSError as error:  # an output file that cannot be written, once the work is done
        print(f"pfs: {error}", file=err)
        return 1
    except KeyboardInterrupt:
        print("pfs: interrupted; anything started goes on on the server", file=err)
        return 130


# ---------------------------------------------------------------------- commands


def cmd_login(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    username = args.username or os.environ.get("PFS_USERNAME") or _ask("username: ", err)
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = os.environ.get("PFS_PASSWORD") or getpass.getpass("password: ")
    with Client(_url(args), token=None, username=username, password=password) as client:
        print(client.token, file=out)
    print(f"pfs: signed in as {username}; export PFS_TOKEN=<the token above> to use it", file=err)
    return 0


def cmd_analyses(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    with _client(args) as client:
        analyses = client.analyses()
    if args.json:
        print(json.dumps([analysis.data for analysis in analyses], indent=2), file=out)
        return 0
    for analysis in analyses:
        epsilon = analysis.spent.get("epsilon", "?")
        allowed = analysis.epsilon_allowed if analysis.epsilon_allowed is not None else "?"
        print(
            f"{analysis.identifier}\t{analysis.status}\tfleet {analysis.fleet}\t"
            f"epsilon spent {epsilon} of {allowed}\t{analysis.title}",
            file=out,
        )
    return 0


def cmd_fleets(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    with _client(args) as client:
        print(json.dumps(client.fleets(), indent=2), file=out)
    return 0


def cmd_budget(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    with _client(args) as client:
        budget = client.budget(args.analysis)
    if args.json:
        print(json.dumps(budget.data, indent=2), file=out)
        return 0
    cap = budget.delta_total
    print(
        f"{budget.analysis}: accountant {budget.accountant}, delta {budget.delta:g} per query, "
        f"total delta {'capped at ' + format(cap, 'g') if cap is not None else 'not capped'}",
        file=out,
    )
    for scope in budget.scopes:
        allowed = scope.epsilon_allowed
        print(
            f"  {scope.scope}: spent (epsilon, delta) = ({scope.epsilon_spent:.6g}, {scope.delta_spent:.3g}) "
            f"by the {scope.account} account, of epsilon {allowed if allowed is not None else '-'}; "
            f"{scope.reports_used} report(s) requested",
            file=out,
        )
    return 0


def cmd_dry_run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    recipe = _read_json(args.recipe)
    with _client(args) as client:
        result = client.dry_run(args.analysis, recipe)
    print(json.dumps(result.data, indent=2), file=out)
    if result.too_noisy:
        print(f"pfs: too noisy: {result.too_noisy_reason} (run needs --confirm-small-cohorts)", file=err)
    return 0


def cmd_propose(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    target = args.half_width if args.half_width is not None else args.relative_error
    if not (math.isfinite(target) and target > 0):
        raise BadInput(f"the target must be a positive finite number, not {target}")
    recipe = _read_json(args.recipe)
    with _client(args) as client:
        answer = client.propose(args.analysis, recipe, half_width=args.half_width, relative_error=args.relative_error)
    print(json.dumps(answer, indent=2), file=out)
    print(f"pfs: {answer['message']}", file=err)
    return 0 if answer["met"] else 1


def cmd_run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if (args.recipe is None) == (args.recipe_id is None):
        raise BadInput("run needs RECIPE.json (with --analysis) or --recipe-id ID, not both")
    if args.recipe is not None and not args.analysis:
        raise BadInput("run RECIPE.json needs --analysis ID")
    recipe = _read_json(args.recipe) if args.recipe is not None else args.recipe_id
    if args.no_wait and (args.csv or args.json):
        raise BadInput("--no-wait returns before the release: export it later with `export ROUND`")
    _check_writable(args.csv, args.json)
    with _client(args) as client:
        return _run(client, args, recipe, out, err)


def _run(client: Client, args: argparse.Namespace, recipe: Any, out: TextIO, err: TextIO) -> int:
    if args.no_wait:
        round_ = client.run_recipe(
            args.analysis,
            recipe,
            wait=False,
            idempotency_key=args.idempotency_key,
            confirm_small_cohorts=args.confirm_small_cohorts,
        )
        print(round_.id, file=out)
        print(f"pfs: {round_.describe()}; follow it with `{PROG} status {round_.id}`", file=err)
        return 0
    release = client.run_recipe(
        args.analysis,
        recipe,
        poll=args.poll,
        timeout=args.timeout,
        idempotency_key=args.idempotency_key,
        confirm_small_cohorts=args.confirm_small_cohorts,
        intervals=args.intervals,
        view=args.view,
        **_progress(err),
    )
    _write_release(release, args.csv, args.json, out, err)
    return 0


def cmd_adaptive(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    spec = _read_json(args.spec)
    _check_writable(None, args.json)
    with _client(args) as client:
        run = client.run_adaptive(
            args.analysis, spec, wait=not args.no_wait, poll=args.poll, timeout=args.timeout, **_progress(err)
        )
    if args.json:
        write_text(json.dumps(run.data, indent=2) + "\n", out if args.json == "-" else args.json)
    _print_run(run, out)
    return 0


def cmd_status(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    with _client(args) as client:
        round_ = client.round(args.round)
    print(json.dumps(round_.data, indent=2) if args.json else round_.describe(), file=out)
    return 0


def cmd_cancel(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    with _client(args) as client:
        print(client.cancel(args.round).describe(), file=out)
    return 0


def cmd_export(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if not (args.csv or args.json):
        raise BadInput("export needs --csv PATH or --json PATH (- for stdout)")
    _check_writable(args.csv, args.json)
    with _client(args) as client:
        _export(client, args, out, err)
    return 0


def _export(client: Client, args: argparse.Namespace, out: TextIO, err: TextIO) -> None:
    if args.csv:
        text = client.release_csv(args.round, intervals=args.intervals, view=args.view)
        write_text(text, out if args.csv == "-" else args.csv)
        if args.csv != "-":
            print(f"pfs: wrote {args.csv}", file=err)
    if args.json:
        client.release(args.round, intervals=args.intervals, view=args.view).to_json(
            out if args.json == "-" else args.json
        )
        if args.json != "-":
            print(f"pfs: wrote {args.json}", file=err)


# ---------------------------------------------------------------------- helpers


def _ask(prompt: str, err: TextIO) -> str:
    """Ask on stderr: stdout carries only the result, for `$(python -m pfs_client login)`."""
    print(prompt, end="", file=err, flush=True)
    return sys.stdin.readline().strip()


def _url(args: argparse.Namespace) -> str:
    return args.url or os.environ.get("PFS_URL") or DEFAULT_URL


def _client(args: argparse.Namespace) -> Client:
    token = args.token or os.environ.get("PFS_TOKEN")
    if not token:
        raise BadInput(f"no token: pass --token, or export PFS_TOKEN=$({PROG} login)")
    try:
        return Client(_url(args), token=token, timeout=args.request_timeout)
    except ValueError as error:
        raise BadInput(str(error)) from error


def _read_json(path: str) -> Any:
    try:
        return load_json(path)
    except OSError as error:
        raise BadInput(f"cannot read {path}: {error.strerror or error}") from error
    except ValueError as error:  # json.JSONDecodeError is a ValueError
        raise BadInput(f"{path} is not a JSON object: {error}") from error


def _check_writable(*paths: str | None) -> None:
    """Refuse an output path whose folder does not exist before anything starts on the server."""
    for path in paths:
        if path and path != "-" and not Path(path).resolve().parent.is_dir():
            raise BadInput(f"cannot write {path}: no folder {Path(path).parent}")


def _progress(err: TextIO) -> dict[str, Any]:
    """How a wait shows its progress: a bar on a terminal; elsewhere (a log, a pipe) one line per change."""
    if err.isatty():
        return {"progress": err}
    return {"progress": False, "on_progress": _progress_printer(err)}


def _progress_printer(err: TextIO) -> Callable[[Round | AdaptiveRun], None]:
    last = [""]

    def show(item: Round | AdaptiveRun) -> None:
        line = item.describe()
        if line != last[0]:
            print(f"pfs: {line}", file=err)
            last[0] = line

    return show


def _write_release(release: Release, csv_path: str | None, json_path: str | None, out: TextIO, err: TextIO) -> None:
    for path, write in ((csv_path, release.to_csv), (json_path, release.to_json)):
        if path == "-":
            write(out)
        elif path:
            write(path)
            print(f"pfs: wrote {path}", file=err)
    if "-" not in (csv_path, json_path):
        _print_release(release, out)


def _print_release(release: Release, out: TextIO) -> None:
    data = release.data
    print(
        f"round {release.round_id} released: {data.get('reports', 0):,} reports, "
        f"min cohort {data.get('min_cohort', 0):,}, epsilon spent {data.get('epsilon_spent')}",
        file=out,
    )
    spent = data.get("analysis_spent")
    if spent:  # releases stored before the statement have none
        print(
            f"analysis {data.get('analysis')} spent (epsilon, delta) = ({spent['epsilon']:.6g}, {spent['delta']:.3g}) "
            f"over {spent['rounds']} round(s), by the {spent['account']} account",
            file=out,
        )
    for batch in release.batches:
        print(f"cohort {batch.get('cohort') or 'all'}: {batch.get('reports', 0):,} reports", file=out)
        if batch.get("suppressed"):
            print(f"  suppressed: {batch.get('reason', '')}", file=out)
            continue
        for bucket in batch["buckets"]:
            low, high = bucket["ci95"]
            print(f"  {bucket['label']:>14}  {bucket['estimate']:>12.1f}  [{low:.1f}, {high:.1f}]", file=out)


def _print_run(run: AdaptiveRun, out: TextIO) -> None:
    print(run.describe(), file=out)
    for level in run.levels:
        kept = level.get("kept")
        if kept is not None:
            names = ", ".join(repr(entry.get("ngram")) for entry in kept[:SHOWN_NGRAMS])
            more = f", … ({len(kept) - SHOWN_NGRAMS} more; --json has them all)" if len(kept) > SHOWN_NGRAMS else ""
            print(f"  length {level.get('length')}: kept {len(kept)}: {names}{more}", file=out)
        else:
            print(f"  round {level.get('round')}: {level.get('buckets')} buckets", file=out)


def _parser() -> argparse.ArgumentParser:
    # --url and --token work before or after the command; SUPPRESS keeps a command's parser from
    # overwriting a value given before it.
    connection = argparse.ArgumentParser(add_help=False)
    connection.add_argument("--url", default=argparse.SUPPRESS, help=f"server (default $PFS_URL, else {DEFAULT_URL})")
    connection.add_argument("--token", default=argparse.SUPPRESS, help="API token (default $PFS_TOKEN)")
    connection.add_argument(
        "--request-timeout", type=float, default=argparse.SUPPRESS, help="seconds per HTTP request (default 30)"
    )
    parser = argparse.ArgumentParser(
        prog=PROG, parents=[connection], description="PFS Studio from the shell (docs/client.md)."
    )
    parser.add_argument("--version", action="version", version=f"pfs-client {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, handler: Callable[..., int], help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, parents=[connection], help=help_text, description=help_text)
        sub.set_defaults(handler=handler)
        return sub

    login = command("login", cmd_login, "sign in and print your API token")
    login.add_argument("--username", help="default $PFS_USERNAME, else asked")
    login.add_argument(
        "--password-stdin", action="store_true", help="read the password from stdin (default $PFS_PASSWORD, else asked)"
    )

    command("analyses", cmd_analyses, "list the analyses you may see").add_argument(
        "--json", action="store_true", help="print them as JSON"
    )
    command("fleets", cmd_fleets, "list the fleets (JSON)")

    budget = command("budget", cmd_budget, "what an analysis has spent: one (epsilon, delta) statement per scope")
    budget.add_argument("analysis", metavar="ID")
    budget.add_argument("--json", action="store_true", help="print the budget report as JSON")

    dry = command("dry-run", cmd_dry_run, "what every device would do with a recipe; nothing is spent")
    dry.add_argument("recipe", metavar="RECIPE.json")
    dry.add_argument("--analysis", required=True, metavar="ID")

    propose = command(
        "propose",
        cmd_propose,
        "the cheapest parameters (least epsilon) within the policy that meet an accuracy target; exit 1 if none do",
    )
    propose.add_argument("recipe", metavar="RECIPE.json", help="its field, buckets, noise and mechanism are kept")
    propose.add_argument("--analysis", required=True, metavar="ID")
    target = propose.add_mutually_exclusive_group(required=True)
    target.add_argument("--half-width", type=float, metavar="X", help="± X devices per bucket at 95%%")
    target.add_argument(
        "--relative-error", type=float, metavar="R", help="relative error R (e.g. 0.1) on the largest bucket at 95%%"
    )

    run = command("run", cmd_run, "run a recipe, wait for its release, print and export it")
    run.add_argument("recipe", metavar="RECIPE.json", nargs="?", help="a new recipe to store and run")
    run.add_argument("--analysis", metavar="ID", help="the analysis to store RECIPE.json in")
    run.add_argument(
        "--recipe-id", type=int, metavar="ID", help="instead of RECIPE.json: a new round of a stored recipe"
    )
    run.add_argument("--csv", metavar="PATH", help="write the release as CSV (- for stdout)")
    run.add_argument("--json", metavar="PATH", help="write the release as JSON (- for stdout)")
    run.add_argument("--no-wait", action="store_true", help="print the round's id once started, and return")
    run.add_argument(
        "--idempotency-key", metavar="KEY", help="the same key again returns the same round (default: a new UUID)"
    )
    run.add_argument(
        "--confirm-small-cohorts",
        action="store_true",
        help="start even if some cohorts are expected below the minimum cohort, or the expected noise exceeds "
        "what most buckets can hold (the dry run's too_noisy): their devices spend for nothing",
    )
    _release_options(run)
    _wait_options(run)

    adaptive = command("adaptive", cmd_adaptive, "run an adaptive analysis (docs/adaptive.md) and wait for it")
    adaptive.add_argument("spec", metavar="SPEC.json")
    adaptive.add_argument("--analysis", metavar="ID", help="the analysis to run it in (default: the spec's)")
    adaptive.add_argument("--json", metavar="PATH", help="write the run as JSON (- for stdout)")
    adaptive.add_argument("--no-wait", action="store_true", help="return once started")
    _wait_options(adaptive, poll=2.0)

    status = command("status", cmd_status, "a round's status and progress")
    status.add_argument("round", type=int, metavar="ROUND")
    status.add_argument("--json", action="store_true", help="print the round as JSON")

    command("cancel", cmd_cancel, "cancel a round that has not finished").add_argument(
        "round", type=int, metavar="ROUND"
    )

    export = command("export", cmd_export, "write a released round as CSV and/or JSON")
    export.add_argument("round", type=int, metavar="ROUND")
    export.add_argument("--csv", metavar="PATH", help="the dashboard's CSV (- for stdout)")
    export.add_argument("--json", metavar="PATH", help="the release's JSON (- for stdout)")
    _release_options(export)
    return parser


def _release_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--intervals", choices=["per-bucket", "simultaneous"], help="default per-bucket")
    parser.add_argument("--view", choices=["raw", "clipped", "thresholded"], help="default raw")


def _wait_options(parser: argparse.ArgumentParser, *, poll: float = 1.0) -> None:
    parser.add_argument("--poll", type=float, default=poll, help=f"seconds between polls (default {poll:g})")
    parser.add_argument("--timeout", type=float, help="give up waiting after this many seconds (default: no limit)")
