"""Trigger intake under ``wrk``: ``POST /dispatch/triggers`` requests per second.

Starts ``ticket-dispatcher serve --sandbox`` as a real process (rate limit off) on SQLite or
PostgreSQL, loads it with ``wrk`` (Debian package ``wrk``) posting triggers for an issue the
sandbox Jira does not know, so the background processing that follows each trigger stays
small, and prints wrk's figures. Then the same load on a bare Falcon app on waitress that
answers 202 without touching a database: the ceiling of the HTTP stack alone.

    python bench/intake.py [--seconds 10] [--connections 16] [--postgres-url URL]
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
from databases import fresh_database

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


def cpu_seconds(pid: int) -> float:
    """User + system CPU the process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_wrk(url: str, seconds: int, connections: int, script: Path, pid: int) -> str:
    cpu_before = cpu_seconds(pid)
    out = subprocess.run(["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "-s", str(script),
                          url], capture_output=True, text=True, check=True).stdout
    cpu = cpu_seconds(pid) - cpu_before
    rate = re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)
    latency = re.search(r"Latency\s+(\S+)", out).group(1)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    failed = non2xx.group(1) if non2xx else 0
    requests_done = int(re.search(r"(\d+) requests in", out).group(1))
    return (f"{float(rate):8.0f} req/s  mean latency {latency}  non-2xx {failed}  "
            f"server CPU {1000 * cpu / requests_done:.2f} ms/request")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--postgres-url", help="run on PostgreSQL (a temporary schema) "
                                               "instead of a temporary SQLite file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, fresh_database(args.postgres_url) as url:
        script = Path(tmp) / "post.lua"
        script.write_text(f'wrk.method = "POST"\nwrk.body = \'{BODY}\'\n'
                          'wrk.headers["Content-Type"] = "application/json"\n')
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
                            script, server.pid))
        finally:
            server.terminate()
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:  # older builds could hang on SIGTERM
                server.kill()
                server.wait()
        port = free_port()
        bare = subprocess.Popen([sys.executable, "-c", BARE_APP, str(port)])
        try:
            wait_ready(f"http://127.0.0.1:{port}/")
            print("bare falcon+waitress:     "
                  + run_wrk(f"http://127.0.0.1:{port}{PATH}", args.seconds, args.connections,
                            script, bare.pid))
        finally:
            bare.terminate()
            bare.wait(10)


if __name__ == "__main__":
    main()
