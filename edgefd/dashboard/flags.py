"""`--dashboard HOST:PORT` and `--dashboard-token-file FILE`, the same on every command that has them."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from edgefd.dashboard.http import DashboardServer, is_loopback, parse_address, read_token


def add_dashboard_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("dashboard (a live, read-only page of the run)")
    group.add_argument(
        "--dashboard",
        metavar="HOST:PORT",
        default=None,
        help="serve the run's page at http://HOST:PORT/ while it runs (off by default); PORT alone binds "
        "127.0.0.1, port 0 takes a free one (the log names it); e.g. --dashboard 8080",
    )
    group.add_argument(
        "--dashboard-token-file",
        metavar="FILE",
        default=None,
        help="a file holding the page's token (16 characters or more): needed to bind beyond 127.0.0.1; "
        "the page is then opened as http://HOST:PORT/?token=TOKEN",
    )


def dashboard_flags(args: argparse.Namespace) -> list[str]:
    """The same flags, for a child process (`edgefd deploy-local`'s server)."""
    flags = []
    if args.dashboard is not None:
        flags += ["--dashboard", args.dashboard]
    if args.dashboard_token_file is not None:
        flags += ["--dashboard-token-file", args.dashboard_token_file]
    return flags


def dashboard_url(args: argparse.Namespace) -> str | None:
    """Where the page will be, checked without serving it (`edgefd deploy-local`, whose server
    serves it): None without --dashboard, "" where the port is left to the server (port 0)."""
    if args.dashboard is None:
        if args.dashboard_token_file is not None:
            raise ValueError("--dashboard-token-file without --dashboard: there is no page to protect")
        return None
    host, port = parse_address(args.dashboard)
    if args.dashboard_token_file is not None:
        read_token(args.dashboard_token_file)
    elif not is_loopback(host):
        raise ValueError(f"--dashboard {args.dashboard}: an address beyond this machine needs --dashboard-token-file")
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/" if port else ""


@contextlib.contextmanager
def dashboard_of(args: argparse.Namespace, snapshot: Callable[[], dict[str, Any]]) -> Iterator[DashboardServer | None]:
    """The page, served while the block runs, when ``--dashboard`` asks for it."""
    if args.dashboard is None:
        if args.dashboard_token_file is not None:
            raise ValueError("--dashboard-token-file without --dashboard: there is no page to protect")
        yield None
        return
    token = None if args.dashboard_token_file is None else read_token(args.dashboard_token_file)
    with DashboardServer(args.dashboard, snapshot, token) as server:
        yield server
