"""python -m pfs_relay: the relay, served by gunicorn (threaded workers: it mostly waits for the leader).

    python -m pfs_relay --leader http://127.0.0.1:8000 [--bind 127.0.0.1:8002]

Every option can come from the environment instead (PFS_RELAY_LEADER, PFS_RELAY_BIND, ...), as a
systemd unit's EnvironmentFile gives it. Bad input exits with code 2 and serves nothing. No access
log: the relay keeps no record of its clients (pfs_relay.relay).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from gunicorn.app.base import BaseApplication

from pfs_relay.relay import Relay


class _Server(BaseApplication):
    def __init__(self, application: Relay, options: dict) -> None:
        self.application = application
        self.options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            self.cfg.set(key, value)

    def load(self) -> Relay:
        return self.application


def _positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be more than 0, not {text}")
        return value

    return parse


def _parser() -> argparse.ArgumentParser:
    env = os.environ.get
    parser = argparse.ArgumentParser(prog="python -m pfs_relay", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--leader", default=env("PFS_RELAY_LEADER"), help="the leader's URL, whose gateway gets every capsule"
    )
    parser.add_argument("--bind", default=env("PFS_RELAY_BIND", "127.0.0.1:8002"), help="host:port (%(default)s)")
    parser.add_argument("--workers", type=_positive(int), default=env("PFS_RELAY_WORKERS", "2"))
    parser.add_argument(
        "--threads", type=_positive(int), default=env("PFS_RELAY_THREADS", "16"), help="per worker (%(default)s)"
    )
    parser.add_argument(
        "--timeout",
        type=_positive(float),
        default=env("PFS_RELAY_TIMEOUT", "30"),
        help="seconds the relay waits for the leader (%(default)s)",
    )
    parser.add_argument(
        "--key-ttl",
        type=_positive(float),
        default=env("PFS_RELAY_KEY_TTL", "300"),
        help="seconds a copy of the leader's key configurations is served before it is fetched again (%(default)s)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    options = parser.parse_args(argv)
    if not options.leader:
        parser.error("--leader (or PFS_RELAY_LEADER) is required: the leader whose gateway gets the capsules")
    try:
        relay = Relay(options.leader, timeout=options.timeout, key_ttl=options.key_ttl)
    except ValueError as error:
        parser.error(f"--leader: {error}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = {
        "bind": [options.bind],
        "workers": options.workers,
        "threads": options.threads,
        "worker_class": "gthread",
        "timeout": max(60, int(options.timeout) + 30),
        "proc_name": "pfs-relay",
        "accesslog": None,
        "errorlog": "-",
        # gunicorn's control socket is one path per user ($HOME/.gunicorn): the leader's or the
        # helper's gunicorn on the same host would contend for it, and the relay needs none.
        "control_socket_disable": True,
    }
    _Server(relay, settings).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
