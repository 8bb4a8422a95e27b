"""`studygroup serve`: its arguments, the listening socket, the URL it prints.

Kept apart from `studygroup.web.app` so that the CLI can list the command without importing the
web framework and the model (the app is imported only when the command runs).

    python -m studygroup.web.serve --port 0          # the same as `studygroup serve --port 0`
"""
from __future__ import annotations

import argparse
import ipaddress
import socket
import sys

from studygroup.errors import InputError

DEFAULT_PORT = 8000


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add `serve` to the CLI's subparsers; its handler is `main`."""
    p = subparsers.add_parser("serve", help="start the local web app and print its URL")
    add_arguments(p)
    p.set_defaults(handler=main)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only; others get a warning)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: any free port)")
    p.add_argument("--model", default=None, metavar="MODEL",
                   help="a GGUF file, ollama:NAME[:TAG], a packaged name (gemma-3-270m, qwen2.5-coder-0.5b, "
                        "qwen2.5-coder-1.5b) or a name `studygroup models` shows")
    p.add_argument("--max-tokens", type=int, default=None, metavar="N",
                   help="longest text the app takes, in tokens (default: the model's context; never past it)")
    p.add_argument("--survey", default=None, metavar="DIR",
                   help="a finished survey of the served model (`studygroup survey --out DIR`): the page marks "
                        "the model view's heads by their role over its corpus")
    p.add_argument("--no-warm", dest="warm", action="store_false",
                   help="do not compute the default text's views at start")


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach.

    >>> is_loopback("127.0.0.1"), is_loopback("localhost"), is_loopback("::1"), is_loopback("0.0.0.0")
    (True, True, True, False)
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (port 0: any free port). InputError if it cannot listen."""
    if not 0 <= port <= 65535:
        raise InputError(f"--port {port} is not a port: use 0-65535")
    bare = host.strip("[]")
    try:
        family = socket.AF_INET6 if ":" in bare else socket.AF_INET
        # IPPROTO_TCP named, so that asyncio turns Nagle's algorithm off on each connection (it does so
        # for sockets that say TCP only): with it on, a small answer's body waits ~40 ms for the ACK
        # of its headers, which the client delays
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((bare, port))
        sock.listen(128)
    except (OSError, UnicodeError) as e:
        raise InputError(f"cannot listen on {host}:{port}: {getattr(e, 'strerror', None) or e}; "
                         f"choose another --port or --host") from None
    return sock


def url(sock: socket.socket) -> str:
    """The address to open in a browser.

    >>> s = bind("127.0.0.1", 0); url(s).startswith("http://127.0.0.1:"); s.close()
    True
    """
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def main(args) -> str:
    """Load the model, listen, print the URL, serve until Ctrl+C. Returns the closing line."""
    from studygroup.model import threads

    threads.set_wait_policy(serving=True)  # before torch is imported (`python -m studygroup.web.serve`)
    if args.max_tokens is not None and args.max_tokens < 1:
        raise InputError(f"--max-tokens {args.max_tokens} is too small: the least is 1")
    from studygroup import progress

    sock = bind(args.host, args.port)  # first: an address it cannot listen on is refused before any warning
    local = is_loopback(sock.getsockname()[0])
    if not local:
        print(f"studygroup: warning: listening on {args.host}, not only on this machine: anyone who can reach "
              f"this address can use the app (there is no login)", file=sys.stderr, flush=True)
    with progress.hidden():  # the console is the server's log: no per-request announcements or bars
        return _serve(args, sock, local)


def _serve(args, sock, local: bool) -> str:
    """Load the model, then serve on the bound socket until stopped."""
    import uvicorn

    from studygroup.model.model import load
    from studygroup.views.payloads import checked_survey
    from studygroup.web.app import LOOPBACK_HOSTS, Limits, create_app
    from studygroup.web.connections import BACKLOG, BoundedH11, quiet_repeats

    model = load(args.model)
    surveyed = None if args.survey is None else checked_survey(args.survey, model)
    hosts = LOOPBACK_HOSTS if local else None
    app = create_app(model, Limits(max_tokens=args.max_tokens), warm=args.warm, hosts=hosts, survey=surveyed)
    note = f" ({model.config.note})" if model.config.note else ""
    print(f"studygroup: serving {model.config.label}{note} at {url(sock)}  (Ctrl+C to stop)", flush=True)
    quiet_repeats()
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2, http=BoundedH11,
                            backlog=BACKLOG)
    uvicorn.Server(config).run(sockets=[sock])
    return "studygroup: stopped"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="studygroup serve", description="The study group's local web app.")
    add_arguments(parser)
    from studygroup.errors import StudyGroupError

    try:
        print(main(parser.parse_args()))
    except StudyGroupError as e:
        print(f"studygroup: error: {e}", file=sys.stderr)
        sys.exit(2)
