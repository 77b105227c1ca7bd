"""Trigger intake under ``wrk``: ``POST /dispatch/triggers`` requests per second.

Starts ``ticket-dispatcher serve --sandbox`` as a real process (rate limit off) on SQLite or
PostgreSQL, loads it with ``wrk`` (Debian package ``wrk``) posting triggers for an issue the
sandbox Jira does not know, so the background processing that follows each trigger stays
small, and prints wrk's figures. Then the same load on a bare Falcon app on waitress that
answers 202 without touching a database: the ceiling of the HTTP stack alone.

    python bench/intake.py [--seconds 10] [--connections 16] [--database-url URL]
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import requests

PATH = "/api/v1/ticketmanager/dispatch/triggers"
BODY = '{"source": "jira_automation", "input": {"issue_key": "NOPE-1"}}'
BARE_APP = textwrap.dedent(f"""
    import falcon, logging, waitress, sys
    logging.getLogger("waitress").setLevel(logging.ERROR)
    class Triggers:
        def on_post(self, req, resp):
            req.bounded_stream.read()
            resp.status = falcon.HTTP_202
            resp.media = {{"id": 1, "status": "pending"}}
    app = falcon.App()
    app.add_route("{PATH}", Triggers())
    waitress.serve(app, host="127.0.0.1", port=int(sys.argv[1]), threads=8, _quiet=True)
""")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_ready(url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if requests.get(url, timeout=1).status_code < 500:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{url} did not come up")


def run_wrk(url: str, seconds: int, connections: int, script: Path) -> str:
    out = subprocess.run(["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "-s", str(script),
                          url], capture_output=True, text=True, check=True).stdout
    rate = re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)
    latency = re.search(r"Latency\s+(\S+)", out).group(1)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    failed = non2xx.group(1) if non2xx else 0
    return f"{float(rate):8.0f} req/s  mean latency {latency}  non-2xx {failed}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--database-url", default="")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "post.lua"
        script.write_text(f'wrk.method = "POST"\nwrk.body = \'{BODY}\'\n'
                          'wrk.headers["Content-Type"] = "application/json"\n')
        url = args.database_url or f"sqlite:///{Path(tmp) / 'intake.db'}"
        port = free_port()
        env = dict(os.environ, TICKET_DISPATCHER_DATABASE_URL=url,
                   TICKET_DISPATCHER_HTTP_TRIGGER_RATE="0", TICKET_DISPATCHER_LOG_LEVEL="WARNING")
        server = subprocess.Popen([sys.executable, "-m", "ticket_dispatcher", "serve", "--sandbox",
                                   "--port", str(port)], env=env, cwd=Path(__file__).parents[1],
                                  stderr=subprocess.DEVNULL)
        try:
            wait_ready(f"http://127.0.0.1:{port}/healthz")
            engine = url.split(":")[0]
            print(f"ticket-dispatcher ({engine}): "
                  + run_wrk(f"http://127.0.0.1:{port}{PATH}", args.seconds, args.connections,
                            script))
        finally:
            server.terminate()
            server.wait(30)
        port = free_port()
        bare = subprocess.Popen([sys.executable, "-c", BARE_APP, str(port)])
        try:
            wait_ready(f"http://127.0.0.1:{port}/")
            print("bare falcon+waitress:     "
                  + run_wrk(f"http://127.0.0.1:{port}{PATH}", args.seconds, args.connections,
                            script))
        finally:
            bare.terminate()
            bare.wait(10)


if __name__ == "__main__":
    main()
