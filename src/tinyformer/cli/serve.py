"""`tinyformer serve PATH`: the playground in the browser for the runs under PATH (`tinyformer.serve`)."""

from __future__ import annotations

import argparse
import contextlib
import ipaddress

from tinyformer import interrupt


def add_serve(p: argparse.ArgumentParser) -> None:
    from tinyformer.serve.limits import Limits

    d = Limits()
    p.add_argument("path", help="a run folder, or a folder of runs (e.g. runs); only runs under it are reachable")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 = any free port)")
    p.add_argument("--device", default="cpu", help="where the models run: cpu, cuda, mps or auto (default cpu)")
    p.add_argument("--max-tokens", type=int, default=d.max_tokens, help=f"tokens per request (default {d.max_tokens})")
    p.add_argument(
        "--max-generations",
        type=int,
        default=d.max_generations,
        help=f"generations running at once; more wait up to {d.wait_s:.0f} s (default {d.max_generations})",
    )
    p.add_argument("--max-body", type=int, default=d.max_body, help=f"request body bytes (default {d.max_body:,})")


def cmd_serve(a: argparse.Namespace) -> int:
    from tinyformer.errors import UserError
    from tinyformer.extras import need

    need("tinyformer serve", "fastapi", "uvicorn")
    for flag in ("max_tokens", "max_generations", "max_body"):
        if getattr(a, flag) < 1:
            raise UserError(f"--{flag.replace('_', '-')} {getattr(a, flag)} must be at least 1")
    if not 0 <= a.port <= 65535:
        raise UserError(f"--port {a.port} is not a port number (0-65535)")
    import uvicorn

    from tinyformer.serve.app import bind, create_app
    from tinyformer.serve.limits import Limits

    limits = Limits(max_body=a.max_body, max_tokens=a.max_tokens, max_generations=a.max_generations)
    app = create_app(a.path, device=a.device, limits=limits)
    sock = bind(a.host, a.port)
    host, port = sock.getsockname()[:2]
    if not is_loopback(a.host):
        print(f"warning: listening on {a.host}: anyone who can reach this machine can use the playground")
    shown = f"[{host}]" if ":" in host else host
    print(f"tinyformer playground: http://{shown}:{port}/  (API: /docs; Ctrl-C stops it)", flush=True)
    server = playground_server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2))
    server.run(sockets=[sock])
    print("tinyformer playground: stopped")
    return 0


def playground_server(config):
    """uvicorn's server under tinyformer's rule for signals (`tinyformer.interrupt`): SIGINT or SIGTERM shuts it
    down gracefully and the command ends normally; a signal ignored when it started stays ignored (uvicorn's
    own would catch it anyway, then raise it again once stopped)."""
    import uvicorn

    class Playground(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self):
            with interrupt.catching(self.handle_exit):
                yield

    return Playground(config)


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
