"""Compare the end-to-end dispatch cost of several source trees, alternated on one machine.

On a shared 2-core machine the speed of the same code drifts by 15 % or more within minutes,
so a "before" run and an "after" run taken one after the other say little about a change of
a few percent. This runs the service of each tree in turn, round after round, against one fake
Jira process (``floors.py jira``), with the dispatches of ``e2e_dispatch.py`` (round robin over
10 engineers, triggers posted from 10 threads), and prints for each run and then as medians:

- dispatches per second (the first POST to the last ``completed_at``);
- the service's CPU per dispatch (user + system of its process);
- that CPU over the fake Jira's CPU per dispatch: the fake makes the same work in every run, so
  the ratio cancels much of the machine's drift;
- how many dispatches were right (the execution succeeded and Jira got exactly one assignment
  for the issue), naming the first ones that were not, as ``e2e_dispatch.py`` checks them.

With ``--intake`` it compares the trigger intake instead, as ``intake.py`` loads it: each run
is a service of the tree on a fresh database, a 1 s ``wrk`` warm-up and its backlog drained,
then ``wrk`` for ``--seconds`` and the backlog drained again; it prints requests per second,
the service's CPU per request during the run, and the time and CPU per request the drain took
after it (the processing the run left). No floor: the trees are compared with each other.

A tree is a directory holding a ``ticket_dispatcher`` package, e.g. a ``git worktree`` of
another commit; the service of each runs with ``PYTHONPATH`` set to it. Settings given with
``--setting NAME=VALUE`` (``TICKET_DISPATCHER_NAME``) apply to every tree. ``--split-cpus``
runs each service on one CPU and the fake Jira on another, as ``e2e_dispatch.py --split-cpus``
does: unpinned, runs of the same code spread over a quarter; so placed, over a few per cent.

    git worktree add /tmp/before HEAD~1
    python bench/compare.py /tmp/before . [--rounds 5] [--triggers 400] [--postgres-url URL]
                            [--setting EXECUTION_SLOTS=20] [--split-cpus]
                            [--intake [--seconds 6]]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import median

import e2e_dispatch as e2e
import intake
from databases import fresh_database
from floors import JiraProcess, pin_process, split_cpus

WHERE = "import ticket_dispatcher; print(ticket_dispatcher.__file__)"


def use_tree(tree: Path) -> None:
    """The services started next import ``tree``'s package: ``PYTHONPATH`` names it, and
    ``PYTHONSAFEPATH`` keeps the working directory off the front of ``sys.path``. Without it
    a service started from the repository root (``python -m``, ``python -c``) imports the
    root's package whatever ``PYTHONPATH`` says, and every tree runs the same code."""
    os.environ.update(PYTHONPATH=str(tree), PYTHONSAFEPATH="1")


def check_trees(trees: list[Path]) -> None:
    """Stop unless a process started as the services are imports each tree's own package."""
    for tree in trees:
        use_tree(tree)
        for cwd in {Path.cwd(), intake.ROOT}:
            found = subprocess.run([sys.executable, "-c", WHERE], cwd=cwd, capture_output=True,
                                   text=True, check=True).stdout.strip()
            if not Path(found).resolve().is_relative_to(tree):
                raise SystemExit(f"a service for {tree} would import {found} (from {cwd})")


def run_tree(tree: Path, jira: JiraProcess, first: int, args: argparse.Namespace,
             settings: dict[str, str]) -> e2e.ServiceRun:
    """One service of ``tree`` on a fresh database: warm-up, then ``args.triggers``
    dispatches of new issues numbered from ``first``."""
    use_tree(tree)
    with fresh_database(args.postgres_url) as url:
        service = e2e.Dispatcher(url, jira, settings)
        try:
            e2e.wait_http(f"{service.url}/readyz", service.process)
            e2e.seed(service, jira, 10)
            warm = e2e.new_issues(jira, e2e.PROJECT, first, e2e.WARM_UP)
            e2e.post_all(service, warm)
            e2e.wait_terminal(service, e2e.WARM_UP, args.timeout)
            keys = e2e.new_issues(jira, e2e.PROJECT, first + e2e.WARM_UP, args.triggers)
            return e2e.dispatch(service, jira, keys, e2e.WARM_UP + args.triggers,
                                args.timeout)
        finally:
            service.kill()


def intake_run(tree: Path, jira: JiraProcess, args: argparse.Namespace, script: Path,
               tmp: Path) -> tuple[intake.WrkRun, float, float]:
    """One service of ``tree`` on a fresh database under ``wrk``: the run, then the seconds
    and the CPU per request of draining the backlog it left."""
    use_tree(tree)
    with (fresh_database(args.postgres_url) as url,
          intake.service(url, tmp, True, jira) as server):
        intake.drain(server, intake.run_wrk(server, 1, args.connections, script).requests)
        run = intake.run_wrk(server, args.seconds, args.connections, script)
        seconds, cpu_ms = intake.drained(server, run.requests)
        return run, seconds, cpu_ms


def compare_intake(trees: list[Path], args: argparse.Namespace, settings: dict[str, str]) -> None:
    for name, value in settings.items():
        os.environ[f"TICKET_DISPATCHER_{name}"] = value
    runs: dict[Path, list[tuple[intake.WrkRun, float, float]]] = {tree: [] for tree in trees}
    with JiraProcess() as jira, tempfile.TemporaryDirectory() as tmp:
        script = intake.post_script(Path(tmp))
        for number in range(args.rounds):
            for tree in trees:
                run, seconds, cpu_ms = intake_run(tree, jira, args, script, Path(tmp))
                runs[tree].append((run, seconds, cpu_ms))
                print(f"round {number + 1}  {tree}  {run.rate:6.0f} requests/s  CPU "
                      f"{run.cpu_ms:4.2f} ms/request  drained in {seconds:4.1f} s, "
                      f"+{cpu_ms:4.2f} ms/request  non-2xx {run.failed}", flush=True)
    print(f"\nmedians over {args.rounds} round(s), intake, "
          f"{'PostgreSQL' if args.postgres_url else 'SQLite'}, wrk -c{args.connections} "
          f"{args.seconds} s a run:")
    for tree, results in runs.items():
        print(f"  {tree}  {median(r.rate for r, _, _ in results):6.0f} requests/s  "
              f"CPU {median(r.cpu_ms for r, _, _ in results):4.2f} ms/request  drained in "
              f"{median(s for _, s, _ in results):4.1f} s, "
              f"+{median(c for _, _, c in results):4.2f} ms/request")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+", type=Path, help="source trees to compare")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--triggers", type=int, default=400, help="dispatches per run")
    parser.add_argument("--postgres-url", help="run on PostgreSQL (a throw-away schema a run)")
    parser.add_argument("--setting", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--split-cpus", action="store_true",
                        help="each tree's service on one CPU, the fake Jira on another: runs "
                             "within a few per cent of each other instead of a quarter")
    parser.add_argument("--intake", action="store_true",
                        help="compare the trigger intake under wrk instead")
    parser.add_argument("--seconds", type=int, default=6, help="--intake: one wrk run")
    parser.add_argument("--connections", type=int, default=16, help="--intake: wrk's")
    args = parser.parse_args()
    trees = [tree.resolve() for tree in args.trees]
    for tree in trees:
        if not (tree / "ticket_dispatcher" / "__init__.py").is_file():
            parser.error(f"{tree} holds no ticket_dispatcher package")
    check_trees(trees)
    given = {}
    for setting in args.setting:
        name, _, value = setting.partition("=")
        given[name.upper()] = value
    if args.intake:
        compare_intake(trees, args, given)
        return
    peer_cpu = None
    if args.split_cpus:
        service_cpu, peer_cpu = split_cpus()
        given["CPU_AFFINITY"] = str(service_cpu)
    settings = {**e2e.SETTINGS, **given}
    runs: dict[Path, list[e2e.ServiceRun]] = {tree: [] for tree in trees}
    with JiraProcess() as jira:
        if peer_cpu is not None:
            pin_process(jira.pid, peer_cpu)
        for number in range(args.rounds):
            for index, tree in enumerate(trees):
                first = 1_000_000 * (1 + number * len(trees) + index)
                result = run_tree(tree, jira, first, args, settings)
                runs[tree].append(result)
                print(f"round {number + 1}  {tree}  {result.rate:6.1f} dispatches/s  "
                      f"CPU {result.cpu_ms:5.1f} ms/dispatch  fake Jira "
                      f"{result.peer_cpu_ms:4.1f} ms  "
                      f"{args.triggers - len(result.problems)} of {args.triggers} ok",
                      flush=True)
                for key, problem in list(result.problems.items())[:10]:
                    print(f"        NOT OK {key}: {problem}")
    print(f"\nmedians over {args.rounds} round(s), "
          f"{'PostgreSQL' if args.postgres_url else 'SQLite'}, {args.triggers} dispatches a run:")
    for tree, results in runs.items():
        print(f"  {tree}  {median(r.rate for r in results):6.1f} dispatches/s  "
              f"CPU {median(r.cpu_ms for r in results):5.1f} ms/dispatch  "
              f"CPU / fake Jira's {median(r.cpu_ms / r.peer_cpu_ms for r in results):5.2f}")


if __name__ == "__main__":
    main()
