"""The ``covbook`` command: run the notebooks, check the claims, build the book (``covbook --help``).

Exit statuses are CONTRIBUTING.md's table (usage errors exit 2, before any kernel starts).  Only ``run`` (without
``--plan``) imports the execution machinery; the other commands import no torch.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from covbook._jsonio import DamagedFile
from covbook.book.lock import Busy, tree_lock

try:  # importing the configuration reads the profiles table of notebooks/profiles.yml
    from covbook.book.config import (
        DEFAULT_PROFILE,
        DEVICES,
        PROFILES,
        Paths,
        Terminated,
        UsageError,
        die_with_parent,
        discover,
        oserror_text,
        project_root,
        select,
        stop_on_sigterm,
    )
except ValueError as _err:  # a damaged profiles table: one line, a usage error, on every command
    print(f"covbook: error: {_err}", file=sys.stderr)
    raise SystemExit(2) from None

__all__ = ["main", "parser"]


def _number(cast: type, expected: str, ok: Callable[[float], bool]) -> Callable[[str], float]:
    """An argparse ``type``: ``cast(text)`` where ``ok`` holds, else a usage error saying ``expected``."""

    def parse(text: str) -> float:
        try:
            x = cast(text) if len(text) <= 100 else None  # int() refuses thousands of digits
        except ValueError:
            x = None
        if x is None or not ok(x):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return x

    return parse


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line (what was wrong and where help is), exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def parser() -> argparse.ArgumentParser:
    from covbook.book.records import versions

    p = _Parser(prog="covbook", description="Run, check and build the covbook companion book.")
    version = versions(("covbook",), missing="unknown (not installed)")["covbook"]  # a source tree on sys.path
    p.add_argument("--version", action="version", version=f"covbook {version}")
    sub = p.add_subparsers(dest="command", required=True)
    wait = _Parser(add_help=False)
    wait.add_argument("--wait", action="store_true", help="wait for another covbook command on this tree to finish")
    runs = _Parser(add_help=False)  # the options of every command that runs notebooks
    runs.add_argument("--device", choices=DEVICES, default="auto",
                      help="auto: CUDA when available (default: %(default)s)")
    runs.add_argument("--jobs", type=_number(int, "a positive integer", lambda n: n >= 1), default=None,
                      help="notebooks run at the same time in local processes (default 1)")
    runs.add_argument("--no-progress", action="store_true", help="no progress bar")
    runs.add_argument("--force", action="store_true", help="ignore the cache (and retrain checkpoints)")
    cluster = _Parser(add_help=False)
    cluster.add_argument("--cluster", metavar="SPEC", help=(
        "run each (notebook, seed) job on a Dask cluster: local:N (N worker processes here), tcp://HOST:PORT (a "
        "`dask scheduler`) or PATH.json (its --scheduler-file), its workers on this filesystem and checkout"))
    sizes = "sizes from notebooks/profiles.yml"
    seconds = _number(float, "a positive number of seconds", lambda x: 0 < x < math.inf)
    r = sub.add_parser("run", parents=[wait, runs, cluster], help="execute notebooks into book/generated")
    r.add_argument("notebooks", nargs="*", metavar="NOTEBOOK", help="e.g. 01 or 01_covariance_readout (default: all)")
    r.add_argument("--profile", choices=PROFILES, default=DEFAULT_PROFILE, help=sizes + " (default: %(default)s)")
    r.add_argument("--seed", type=_number(int, "a non-negative integer below 2**63", lambda n: 0 <= n < 2**63),
                   default=0, help="seed of every random generator (default: %(default)s)")
    r.add_argument("--timeout", type=seconds, default=None, metavar="SECONDS",
                   help="each notebook's time limit (default: 5x the plan's estimate, at least 10 min; "
                        "without one, the profile's time_limit in profiles.yml)")
    r.add_argument("--plan", action="store_true", help="print the work and a time estimate per notebook; run nothing")
    r.add_argument("--rehearse", action="store_true",
                   help="the profile's shapes at short lengths (the parameters under `lengths:` in profiles.yml)")
    c = sub.add_parser("check", help="verify the claims of the last run")
    c.add_argument("--json", action="store_true", help="print every judged claim as JSON (with kind, basis, reason)")
    s = sub.add_parser("sweep", parents=[wait, runs, cluster],
                       help="run notebooks at several seeds; write the calibration table")
    s.add_argument("notebooks", nargs="*", metavar="NOTEBOOK", help="e.g. 01 (default: all)")
    s.add_argument("--seeds", required=True,
                   help="inclusive range A-B, e.g. 0-9 (required; at most 10000 seeds, each at most 2**63 - 1)")
    s.add_argument("--profile", choices=PROFILES, default="smoke", help=sizes + " (default: %(default)s)")
    sub.add_parser("build", parents=[wait], help="write the reproduction report and build the HTML book")
    e = sub.add_parser("edition", parents=[wait, runs],
                       help="run the chapters at a profile and store them in book/edition (the published runs)")
    e.add_argument("profile", choices=PROFILES, help=f"{sizes} (the paper scale: full)")
    e.add_argument("notebooks", nargs="*", metavar="NOTEBOOK", help="e.g. 08 (default: all)")
    e.add_argument("--timeout", type=seconds, default=None, metavar="SECONDS", help="each notebook's time limit")
    sub.add_parser("publish", parents=[wait], help="rewrite book/generated/*.ipynb as published: their setup "
                   "cell installs covbook from the repository's executed-notebooks branch")
    sub.add_parser("clean", parents=[wait], help="remove generated notebooks, claims, temporaries and the built book")
    return p


def _say(lines: Iterable[str], prefix: str = "  ") -> None:
    """Print each line on stderr after ``prefix``."""
    for line in lines:
        print(prefix + line, file=sys.stderr)


def _inputs(paths: Paths, names: list[str] | None) -> list[str]:
    """The notebooks ``names`` select; a :class:`UsageError` for a source not UTF-8 or an invalid rules file."""
    from covbook.book.cache import source_text
    from covbook.book.checks import read_rules

    chosen = select(paths, names)
    for name, src in chosen.items():
        source_text(src, paths.root)
        read_rules(paths, name)
    return list(chosen)


@contextmanager
def _writer(args: argparse.Namespace, paths: Paths) -> Iterator[object]:
    """Hold the tree's lock and the ``--cluster``'s Dask cluster (``None``: local processes) for the block; a bad
    ``--cluster`` is a usage error.  An interrupted run says what finished and is kept and what did not, and exits
    130 (143 for SIGTERM)."""
    from covbook.book.runner import Interrupted

    engine = nullcontext(None)
    if getattr(args, "cluster", None) is not None:
        if args.jobs is not None:
            raise UsageError("--jobs and --cluster exclude each other (the cluster's workers set how many run at once)")
        from covbook.book.distributed import open_cluster, parse_cluster

        parse_cluster(args.cluster)  # a bad spec is a usage error before the lock (which --wait may wait for)
        engine = open_cluster(args.cluster)
    command = "covbook " + " ".join(sys.argv[1:]) if sys.argv[1:] else f"covbook {args.command}"
    try:
        with tree_lock(paths.lock, command, wait=args.wait), engine as executor:
            yield executor
    except Interrupted as stop:  # (an edition stores the chapters that finished ok)
        kept = ", ".join(f"{r.name} ({r.status})" for r in stop.results) or "none"
        print(f"covbook {args.command}: {stop.how}; finished and kept: {kept}; not finished: "
              f"{', '.join(stop.unfinished) or 'none'}", file=sys.stderr)
        raise SystemExit(stop.exit_status) from None


def cmd_run(args: argparse.Namespace, paths: Paths) -> int:
    _inputs(paths, args.notebooks)
    if args.plan:
        from covbook.book.plan import plan_jobs, print_plan

        jobs = plan_jobs(paths, args.notebooks, profile=args.profile, device=args.device, seed=args.seed,
                         rehearse=args.rehearse, resolved_device="cuda" if args.device == "cuda" else None)
        return print_plan(jobs, profile=args.profile, device=args.device, rehearse=args.rehearse, workers=args.jobs)
    from covbook.book.runner import run_notebooks

    with _writer(args, paths) as engine:
        results = run_notebooks(paths, args.notebooks, profile=args.profile, device=args.device, seed=args.seed,
                                jobs=args.jobs or 1, force=args.force, progress=not args.no_progress,
                                rehearse=args.rehearse, cluster=engine, timeout=args.timeout)
    failed = [r for r in results if r.status == "failed"]
    done = [r.name for r in results if r.status != "failed"]
    claims_text, problems = "", []
    if args.rehearse:  # short lengths: its claims say nothing about the theory, only that every cell ran
        claims_text = "; claims not judged (a rehearsal)"
    elif done:  # judged as `covbook check` judges them, with every problem it finds in these notebooks
        from covbook.book.checks import check

        v = check(paths)
        claims = [c for c in v.claims if c.notebook in done]
        problems = [p for n in done for p in v.problems_of(n)]
        claims_text = (f"; {sum(not c.passed for c in claims)} of {len(claims)} claims failed"
                       + (f" in the {len(done)} notebook(s) that ran" if failed else "")
                       + (" (see covbook check)" if problems else ""))
    print(f"covbook run: {sum(r.status == 'ok' for r in results)} executed, "
          f"{sum(r.status == 'cached' for r in results)} cached, {len(failed)} failed "
          f"({sum(r.seconds for r in results):.1f} s of notebook time){claims_text}")
    _say([f"FAILED {r.name}: {r.error}" for r in failed] + problems)
    return 1 if failed or problems else 0


def cmd_edition(args: argparse.Namespace, paths: Paths) -> int:
    from covbook.book import edition

    names = _inputs(paths, args.notebooks)  # UTF-8 sources, valid rules: before any kernel
    with _writer(args, paths):
        results, device = edition.make(paths, names, profile=args.profile, device=args.device, jobs=args.jobs or 1,
                                       timeout=args.timeout, force=args.force, progress=not args.no_progress)
    failed = [r for r in results if r.status == "failed"]
    size = sum(f.stat().st_size for f in (paths.root / edition.EDITION).rglob("*") if f.is_file())
    print(f"covbook edition: {len(results) - len(failed)} of {len(results)} chapters stored in {edition.EDITION} "
          f"({args.profile}, {device}; {size / 2**20:.1f} MiB)")
    problems = edition.edition_problems(paths)[0]
    _say([f"FAILED {r.name}: {r.error}" for r in failed] + problems)
    return 1 if failed or problems else 0


def _broken(paths: Paths, command: str, find: Callable[[Paths, list[str]], list[str]]) -> list[str]:
    """The notebooks ``find`` (``cache.damaged_outputs`` or ``cache.failed_runs``) reports; its lines printed."""
    found = {name: find(paths, [name]) for name in discover(paths)}
    _say([line for lines in found.values() for line in lines], f"covbook {command}: ")
    return [name for name, lines in found.items() if lines]


def cmd_check(args: argparse.Namespace, paths: Paths) -> int:
    from covbook.book.cache import damaged_outputs, failed_runs
    from covbook.book.checks import check
    from covbook.book.config import load_profiles
    from covbook.book.edition import edition_problems

    load_profiles(paths.profiles)  # a stored run's key reads it: a damaged one is a usage error, not a traceback
    if _broken(paths, "check", damaged_outputs):
        return 1
    failed = _broken(paths, "check", failed_runs)
    start = time.perf_counter()
    v = check(paths)
    problems, notes = edition_problems(paths)  # the stored edition, re-judged by the current rules
    v.problems.extend(problems)
    v.notes.extend(notes)
    seconds = time.perf_counter() - start
    if args.json:
        print(json.dumps(v.as_json(), indent=1))
    else:
        for c in v.claims:
            print(c.verdict_line())
        weak = sum(c.rule_kind == "evidence" and c.kind == "compatible" for c in v.claims)
        unjudged = "".join(f"; {n} claim(s) of {name} not judged (its rules file is invalid)"
                           for name, n in v.unjudged.items())
        print(f"covbook check: {sum(c.passed for c in v.claims)} of {len(v.claims)} claims pass{unjudged}; "
              f"{sum(c.kind == 'evidence' for c in v.claims)} evidence, "
              f"{sum(c.kind == 'compatible' for c in v.claims)} compatible ({weak} of them evidence rules "
              f"without power at their profile; judged in {seconds:.2f} s)")
    _say([f"note: {n}" for n in v.notes] + v.problems)
    return 0 if v.ok and not failed else 1


def _forget_pages(paths: Paths, names: list[str]) -> None:
    """Remove the built pages of chapters ``names`` (a failed chapter must not show its old results)."""
    build = paths.root / "_build"
    for name in names:
        for folder in ("html/generated", "html/_sources/generated", ".doctrees/generated", "jupyter_execute/generated"):
            for page in (build / folder).glob(f"{name}.*"):
                page.unlink(missing_ok=True)


def _jupyter_book(cmd: list[str], paths: Paths) -> tuple[int, set[str]]:
    """Run the book build in a process group of its own; returns its status and the chapters it warned about.
    On Ctrl-C or SIGTERM its process group is stopped, and Sphinx's memory of the pages it read forgotten."""
    from covbook.book.runner import kill_group

    chapter = re.compile(r"generated/(\d\d_[A-Za-z0-9_]+)")
    proc = subprocess.Popen(cmd, cwd=paths.root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", bufsize=1, start_new_session=True,
                            preexec_fn=die_with_parent if sys.platform.startswith("linux") else None)
    warned: set[str] = set()
    try:
        for line in proc.stdout:
            sys.stdout.write(line)
            if "WARNING" in line or "ERROR" in line:
                warned.update(chapter.findall(line))
        return proc.wait(), warned
    except BaseException:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        kill_group(proc)
        shutil.rmtree(paths.root / "_build" / ".doctrees", ignore_errors=True)
        raise


def _copy_mathjax(paths: Paths) -> None:
    """Serve MathJax 3 from the book itself, so an offline copy renders math."""
    import mathjax  # the django-static-mathjax distribution

    dst = paths.generated / "_mathjax" / "mathjax"
    if not (dst / "tex-chtml.js").is_file():
        tmp = dst.with_name("mathjax.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(Path(mathjax.__file__).parent / "static" / "mathjax" / "es5", tmp,
                        ignore=shutil.ignore_patterns("sre", "*-full*", "*-svg*", "mml-*", "node-main.js"))
        shutil.rmtree(dst, ignore_errors=True)
        tmp.rename(dst)


def cmd_build(args: argparse.Namespace, paths: Paths) -> int:
    from covbook.book.cache import damaged_outputs, failed_runs, source_text
    from covbook.book.report import write_report

    for src in discover(paths).values():
        source_text(src, paths.root)  # each chapter UTF-8 text (a usage error naming the file otherwise)
    with _writer(args, paths):
        damaged = _broken(paths, "build", damaged_outputs)
        failed = [] if damaged else _broken(paths, "build", failed_runs)
        if damaged or failed:
            _forget_pages(paths, damaged or failed)
            if failed:
                print(f"covbook build: not built: {len(failed)} notebook(s) failed; their old pages were removed "
                      "from _build/html", file=sys.stderr)
            return 1
        if missing := [n for n in discover(paths) if not (paths.generated / f"{n}.ipynb").is_file()]:
            print(f"covbook build: {len(missing)} notebook(s) not run yet ({', '.join(missing)}): "
                  "run `covbook run` first (e.g. `covbook run --profile smoke`)", file=sys.stderr)
            return 1
        print(f"covbook build: wrote {write_report(paths).relative_to(paths.root)}")
        _copy_mathjax(paths)
        jb = Path(sys.executable).with_name("jupyter-book")
        if not jb.is_file():
            raise UsageError(f"jupyter-book is not installed next to {sys.executable}; run `make setup`")
        status, warned = _jupyter_book([str(jb), "build", "book/", "--config", "_config.yml", "-W", "-n",
                                        "--keep-going"], paths)
        if status:  # Sphinx re-reads only changed pages: the next build must read them all, or -W would pass
            shutil.rmtree(paths.root / "_build" / ".doctrees", ignore_errors=True)
            _forget_pages(paths, sorted(warned))
            if warned:
                print(f"covbook build: failed; removed the pages of {', '.join(sorted(warned))} from _build/html",
                      file=sys.stderr)
            return 1
    from covbook.book.checks import check

    _say([n for n in check(paths).notes if n.startswith("chapters were run at mixed")], "covbook build: warning: ")
    print(f"covbook build: open {paths.root / '_build' / 'html' / 'index.html'}")
    return 0


def cmd_sweep(args: argparse.Namespace, paths: Paths) -> int:
    from covbook.book.sweep import parse_seeds, run_sweep

    seeds = parse_seeds(args.seeds)
    _inputs(paths, args.notebooks)
    with _writer(args, paths) as engine:
        data = run_sweep(paths, seeds, args.notebooks, profile=args.profile, device=args.device,
                         jobs=args.jobs or 1, force=args.force, progress=not args.no_progress, cluster=engine)
    flagged = [f"{n}:{r['id']}" for n, e in data.items() for r in e["claims"] if r["flagged"]]
    failed = [n for n, e in data.items() if e["failed_seeds"]]
    print(f"covbook sweep: {sum(len(e['claims']) for e in data.values())} claims, {len(flagged)} flagged; "
          "wrote book/calibration.json and book/generated/calibration.md")
    _say([f"flagged {f}" for f in flagged]
         + [f"{n} failed at seed(s) {', '.join(map(str, data[n]['failed_seeds']))}" for n in failed])
    return 1 if flagged or failed else 0


def cmd_clean(args: argparse.Namespace, paths: Paths) -> int:
    with _writer(args, paths):
        targets = [p for p in (paths.generated, paths.root / "_build", paths.tmp) if p.exists()]
        for p in targets:
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    removed = ", ".join(str(p.relative_to(paths.root)) for p in targets)
    print(f"covbook clean: {'removed ' + removed if targets else 'nothing to remove'}")
    return 0


def cmd_publish(args: argparse.Namespace, paths: Paths) -> int:
    """Rewrite each executed notebook as published (setup cell: install from the repository), its record following."""
    from covbook.book.cache import verify_outputs
    from covbook.book.repository import ENV, resolve_repository
    from covbook.book.runner import commit_rewritten
    from covbook.book.standalone import book_context, standalone_file

    try:
        repo = resolve_repository(paths.root)
    except ValueError as err:
        raise UsageError(str(err)) from None
    if repo is None:
        raise UsageError(f"the repository is not known; set {ENV}=owner/name")
    notebooks, filled = sorted(paths.generated.glob("[0-9][0-9]_*.ipynb")), []
    with _writer(args, paths):
        for nb in notebooks:  # every input checked (parsed, the file its record names) before the first is rewritten
            verify_outputs(paths, nb.stem)
        context = book_context(paths.root)
        paths.tmp.mkdir(parents=True, exist_ok=True)
        for nb in notebooks:
            with tempfile.TemporaryDirectory(prefix="publish-", dir=paths.tmp) as d:
                if standalone_file(nb, Path(d) / nb.name, paths.root, repo.pages_url, repo.install_source, context):
                    filled.append(nb.name)
                commit_rewritten(paths, nb.stem, Path(d) / nb.name)
    print(f"covbook publish: {repo.slug}; setup cells point to {repo.install_source} in "
          f"{len(filled)} of {len(notebooks)} notebooks")
    return 0


COMMANDS = {"run": cmd_run, "check": cmd_check, "build": cmd_build, "clean": cmd_clean, "sweep": cmd_sweep,
            "edition": cmd_edition, "publish": cmd_publish}


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    stop_on_sigterm()  # SIGTERM (CI systems, `timeout`) is handled like Ctrl-C
    try:
        paths = Paths(project_root())
        return COMMANDS[args.command](args, paths)
    except UsageError as err:
        print(f"covbook {args.command}: error: {err}", file=sys.stderr)
        return 2
    except DamagedFile as err:
        rel = err.path.relative_to(paths.root) if err.path.is_relative_to(paths.root) else err.path
        print(f"covbook {args.command}: {rel} is damaged ({err.reason})", file=sys.stderr)
        return 1
    except Busy as err:
        print(f"covbook {args.command}: {err}", file=sys.stderr)
        return 1
    except Terminated:
        print(f"covbook {args.command}: stopped by SIGTERM", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print(f"covbook {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `covbook check --json | head`: the reader left; say nothing more
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a tool killed by the pipe would exit
    except OSError as err:  # the environment failed (a full disk, a read-only folder): one line, no traceback
        print(f"covbook {args.command}: error: {oserror_text(err)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
