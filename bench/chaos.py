"""A chaos soak: replicas under a seeded nemesis and a steady load, then the checker's verdict.

Runs tests/chaos/soak.py's ``run_soak``: the fakes of Jira, Lark, Oncall and Core in their own
process, N ``ticket-dispatcher serve`` replicas in shared mode on a throw-away PostgreSQL schema
(or one process on a SQLite file), a load of assign and notification triggers with ACKs, and
the nemesis's faults (kill -9, SIGSTOP past the lease, rolling SIGTERM restarts, a replica's
database cut or stalled, SQLite's write lock held elsewhere, Jira 5xx/429/slow, Lark and
Oncall failing or slow, two at once). Everything the run did and saw is written to the run
directory; then ``python -m tests.chaos.checker RUN_DIR`` judges it.

Prints the seed (a fresh one unless ``--seed`` gives it: give it again to replay the plan), the
plan, the operations by outcome, the faults by kind and the checker's report. The exit code is
the checker's: 0 no violation, 1 violations; 2 the run itself could not be made.

    python bench/chaos.py [--seed N] [--duration 2m] [--engine postgres|sqlite]
                          [--replicas 3] [--out RUN_DIR] [--rate 4] [--postgres-url URL]
                          [--kinds kill9 db_cut ...] [--lease 12] [--settle 180]
    python bench/chaos.py --target staging.toml [--lease SECONDS] ...

With ``--target``, the soak drives a deployment of your own instead of replicas it starts: the
file says where its replicas and database are, where the fakes listen for it, and the shell
hooks that break it (tests/chaos/staging.py; docs/operations.md, "The chaos soak").
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.chaos import cluster  # noqa: E402  (needs the root above)
from tests.chaos.load import LoadConfig  # noqa: E402
from tests.chaos.nemesis import POSTGRES_KINDS, SQLITE_KINDS  # noqa: E402
from tests.chaos.soak import (  # noqa: E402
    DEFAULT_POSTGRES_URL,
    LEASE_S,
    SETTLE_S,
    SQLITE_RATE,
    run_soak,
)
from tests.chaos.staging import TargetError, load_target  # noqa: E402

DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h)?$")
UNITS = {"s": 1, "m": 60, "h": 3600, None: 1}


def duration(text: str) -> float:
    found = DURATION.match(text.strip())
    if not found:
        raise argparse.ArgumentTypeError(f"a duration like 60s, 2m or 30m, not {text!r}")
    return float(found.group(1)) * UNITS[found.group(2)]


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, help="the nemesis's and the load's seed "
                                                 "(default: a fresh one, printed)")
    parser.add_argument("--duration", type=duration, default=120.0,
                        help="how long the load and the faults run: 60s, 2m, 30m (default 2m)")
    parser.add_argument("--engine", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--replicas", type=int,
                        help="replicas (default 3 on PostgreSQL; SQLite has one)")
    parser.add_argument("--out", type=Path, help="the run directory (default: "
                                                 "$TMPDIR/chaos-runs/<time>-<engine>-seed-<N>)")
    parser.add_argument("--rate", type=float,
                        help=f"triggers a second (default {LoadConfig.rate:g} on PostgreSQL's "
                             f"three replicas, {SQLITE_RATE:g} on SQLite's one process)")
    parser.add_argument("--kinds", nargs="+", help="the fault kinds to draw from "
                                                   "(default: all the engine has)")
    parser.add_argument("--lease", type=float, default=LEASE_S,
                        help="leases.duration in seconds (default %(default)s)")
    parser.add_argument("--settle", type=float, default=SETTLE_S,
                        help="the most seconds the service gets to settle after the run")
    parser.add_argument("--postgres-url", default=os.environ.get(
        "TICKET_DISPATCHER_TEST_DATABASE_URL", DEFAULT_POSTGRES_URL))
    parser.add_argument("--target", type=Path,
                        help="soak this deployment (a TOML target file) instead of replicas "
                             "of the soak's own")
    args = parser.parse_args(argv)
    args.target_config = None
    if args.target is not None:
        try:
            args.target_config = load_target(args.target)
        except TargetError as exc:
            parser.error(f"--target: {exc}")
        args.engine = "staging"
        known = args.target_config.kinds()
        if args.kinds and set(args.kinds) - set(known):
            parser.error(f"--kinds: this target can do {', '.join(known)}")
    if args.seed is None:
        args.seed = secrets.randbelow(10**6)
    if args.replicas is None:
        args.replicas = 3 if args.engine == "postgres" else 1
    if args.rate is None:
        args.rate = SQLITE_RATE if args.engine == "sqlite" else LoadConfig.rate
    if args.out is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        args.out = Path(tempfile.gettempdir()) / "chaos-runs" / \
            f"{stamp}-{args.engine}-seed-{args.seed}"
    known = POSTGRES_KINDS if args.engine == "postgres" else SQLITE_KINDS
    if args.target is None and args.kinds and set(args.kinds) - set(known):
        parser.error(f"--kinds: {args.engine} has {', '.join(known)}")
    return args


def _interrupted(signum: int, frame) -> None:
    """SIGTERM or SIGHUP unwinds the run like Ctrl-C: every ``finally`` stops what it
    started."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


def operations(run_dir: Path) -> str:
    requests = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text()
                .splitlines() if line.strip()]
    by_status = Counter("no answer" if r["status"] is None else str(r["status"])
                        for r in requests)
    by_mix = Counter(r["mix"] for r in requests if r["attempt"] == 1)
    acks = Counter(json.loads(line)["how"] for line in (run_dir / "acks.jsonl").read_text()
                   .splitlines() if line.strip())
    statuses = ", ".join(f"{status}: {count}" for status, count in sorted(by_status.items()))
    return (f"operations: {len(requests)} requests ({statuses}); first tries by mix: "
            f"{dict(by_mix)}; ACKs: {dict(acks)}")


def faults(run_dir: Path) -> str:
    applied = Counter(json.loads(line)["kind"] for line in (run_dir / "faults.jsonl")
                      .read_text().splitlines() if line.strip())
    run = json.loads((run_dir / "run.json").read_text())
    skipped = Counter(f["kind"] for f in run.get("faults_skipped") or [])
    text = "faults applied: " + (", ".join(f"{k} {v}" for k, v in sorted(applied.items()))
                                 or "none")
    if skipped:
        text += "; skipped: " + ", ".join(f"{k} {v}" for k, v in sorted(skipped.items()))
    return text


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    atexit.register(cluster.end_all)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupted)
    print(f"seed {args.seed} (replay: --seed {args.seed}), run directory {args.out}",
          flush=True)
    load = LoadConfig(rate=args.rate)
    began = time.monotonic()
    try:
        run_dir = run_soak(args.seed, args.duration, args.engine, args.replicas, args.out,
                           postgres_url=args.postgres_url, load=load, lease_s=args.lease,
                           settle_s=args.settle, kinds=args.kinds, target=args.target_config,
                           say=lambda line: print(line, flush=True))
    except KeyboardInterrupt as exc:
        print(f"interrupted ({exc or 'SIGINT'}); everything started was stopped",
              file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 (the run could not be made: say why, exit 2)
        print(f"the run failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    finally:
        cluster.end_all()
    print(f"run done in {time.monotonic() - began:.0f} s: {run_dir}")
    print(f"seed {args.seed}")
    print(operations(run_dir))
    print(faults(run_dir), flush=True)
    verdict = subprocess.run([sys.executable, "-m", "tests.chaos.checker", str(run_dir)],
                             cwd=ROOT)
    print(f"checker exit code {verdict.returncode} (seed {args.seed}, {run_dir})")
    return verdict.returncode


if __name__ == "__main__":
    sys.exit(main())
