"""The ``icml`` command line. Fixed commands; the plugin is an argument, so ``--help`` loads no
plugin and ``list`` imports only plugins' light entry modules."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from icml import __version__

app = typer.Typer(
    name="icml",
    help="Run, inspect and write plugins implementing ICML 2026 methods.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
_state: dict[str, object] = {"modules": []}

CapabilityArg = Annotated[Optional[str], typer.Argument(
    help="train, infer, evaluate, quantize or differentiate; default: the plugin's primary one")]


def _console(stderr: bool = False):  # noqa: ANN202 - rich is imported lazily
    import shutil

    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    # Wide tables stay readable in logs and pipes, where rich would assume 80 columns.
    width = None if stream.isatty() else max(shutil.get_terminal_size((160, 24)).columns, 160)
    return Console(stderr=stderr, highlight=False, soft_wrap=True, width=width)


def _fail(message: str, code: int) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def _version_cb(value: bool) -> None:
    if value:
        typer.echo(f"icml-core {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version_cb, is_eager=True,
                                          help="Print the core's version and exit.")] = False,
    plugin_module: Annotated[list[str], typer.Option(
        "-p", "--plugin-module",
        help="Also load this importable module as a plugin (development; repeatable).")] = [],  # noqa: B006
) -> None:
    _state["modules"] = list(plugin_module)


def _host(only: list[str] | None = None, *, require_modules: bool = True):  # noqa: ANN202
    from icml.loader import PluginLoadError, load_plugins

    try:
        host = load_plugins(only=only, modules=_state["modules"])  # type: ignore[arg-type]
    except PluginLoadError as exc:
        raise _fail(str(exc), 1) from None
    if require_modules:  # a module the user named with -p must load: never ignore it silently
        for rec in host.all_records:
            if rec.target in _state["modules"] and not rec.ok:  # type: ignore[operator]
                raise _fail(f"-p {rec.target}: {rec.error}", 2)
    return host


@app.command("list")
def list_plugins(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """List installed plugins: slug, version, capabilities, summary; broken ones marked."""
    host = _host()
    rows = [r.as_dict() for r in host.all_records]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        typer.echo("No plugins installed. Install one, e.g. `pip install ./plugins/<slug>`.")
        return
    from rich.markup import escape
    from rich.table import Table

    table = Table("plugin", "version", "capabilities", "summary", box=None)
    for r in rows:
        if r["status"] == "ok":
            summary = escape(r["summary"])
        else:
            summary = f"[red]{r['status']}[/red]: {escape(r['error'])}"
        table.add_row(escape(r["slug"]), r["version"] or "-",
                      ", ".join(r["capabilities"]) or "-", summary)
    _console().print(table)
    broken = [r for r in host.all_records if not r.ok and r.status != "disabled"]
    for r in broken:
        typer.echo(f"  {r.slug}: fix: {r.fix}" if r.fix else f"  {r.slug}: {r.error}", err=True)
    for r in host.all_records:
        for w in r.warnings:
            typer.echo(f"  warning: {r.slug} {w}", err=True)


def _require(host, slug: str):  # noqa: ANN001, ANN202
    from icml.loader import PluginLoadError, UnknownPluginError

    try:
        return host.loaded(slug)
    except UnknownPluginError as exc:
        raise _fail(str(exc), 2) from None
    except PluginLoadError as exc:
        raise _fail(str(exc), 1) from None


@app.command()
def info(
    slug: Annotated[str, typer.Argument(help="The plugin's slug (see `icml list`).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Show a plugin's paper, capabilities and every config key with type, default and help."""
    from icml.config import schema_rows

    rec = _require(_host(only=[slug]), slug)
    info = rec.info
    schemas = {cap: schema_rows(info.configs[cap]) for cap in info.capabilities}
    if as_json:
        typer.echo(json.dumps({**rec.as_dict(), "paper": info.paper.__dict__,
                               "primary": info.primary, "default_threads": info.default_threads,
                               "config": schemas}, indent=2,
                              default=str))
        return
    from rich.markup import escape
    from rich.table import Table

    con = _console()
    con.print(f"[bold]{escape(info.name)}[/bold] {rec.version}  ({rec.distribution})")
    con.print(info.title, markup=False)
    con.print(info.summary, markup=False)
    con.print(f"paper: {info.paper.title} -- {info.paper.url}", markup=False)
    con.print(f"capabilities: {', '.join(info.capabilities)} (primary: {info.primary})")
    if info.default_threads is not None:
        con.print(f"torch CPU threads: {info.default_threads} unless `icml run --threads N`")
    for cap, rows in schemas.items():
        table = Table("key", "type", "default", "allowed", "help", title=f"config for {cap}",
                      title_justify="left", box=None)
        for row in rows:
            default = "(required)" if row["required"] else json.dumps(row["default"],
                                                                      default=str)
            table.add_row(*(escape(str(c)) for c in (row["key"], row["type"], default,
                                                      row["allowed"], row["help"])))
        con.print(table)
    con.print(f"run: icml run {slug} [CAPABILITY] --set key=value ...")


@app.command()
def run(
    slug: Annotated[str, typer.Argument(help="The plugin's slug (see `icml list`).")],
    capability: CapabilityArg = None,
    config: Annotated[Optional[Path], typer.Option(
        "--config", "-c", help="TOML file with config keys (see `icml info SLUG`).")] = None,
    set_: Annotated[list[str], typer.Option(
        "--set", "-s", help="Override one config key: key=value (dotted for nested; repeatable).")
    ] = [],  # noqa: B006
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for run folders.")] = Path(
        "runs"),
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda, cuda:1, ...")] = "auto",
    dtype: Annotated[str, typer.Option(help="float32, bfloat16, float16, float64")] = "float32",
    debug: Annotated[bool, typer.Option("--debug", help="Show the full traceback on failure.")
                     ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")] = False,
    threads: Annotated[Optional[int], typer.Option(
        help="CPU threads for torch during the run (default: ICML_THREADS, else the plugin's "
             "default_threads, else torch's own choice).")] = None,
    save_results: Annotated[Optional[Path], typer.Option(
        "--save-results", help="Also write the run's tables as a results file (the evidence "
        "behind a README table; see `icml reproduce`). A new file is marked quick (part of "
        "`icml reproduce --quick`) when the run took at most 120 s; a rewritten one keeps its "
        "flag.")] = None,
) -> None:
    """Run a plugin's job; writes result.json and report.md into a fresh run folder."""
    import logging
    import shlex

    from icml.config import ConfigError
    from icml.results import Clock
    from icml.runner import RunFailed
    from icml.runner import run as do_run

    host = _host(only=[slug])
    _require(host, slug)
    logging.basicConfig(level=logging.WARNING if quiet else logging.INFO,
                        format="%(message)s", stream=sys.stderr)
    run_dir: list[Path] = []

    def announce(path: Path) -> None:
        run_dir.append(path)
        typer.echo(f"run folder: {path}", err=True)

    clock = Clock()
    try:
        result = do_run(slug, capability, config_file=config, overrides=set_, out=out,
                        seed=seed, device=device, dtype=dtype, host=host,
                        show_progress=not quiet, threads=threads, on_run_dir=announce)
    except ConfigError as exc:
        where = f" (run folder: {run_dir[0]})" if run_dir else ""
        raise _fail(str(exc) + where, 2) from None
    except RunFailed as exc:
        if debug:
            log = Path(exc.result.run_dir) / "run.log"
            typer.echo(log.read_text(encoding="utf-8"), err=True)
        kept = _kept(exc.result)
        raise _fail(str(exc) + (f"; {kept}" if kept else ""), 1) from None
    except KeyboardInterrupt:
        if not run_dir:
            raise _fail("interrupted before the run started", 130) from None
        from icml.runner import load_result

        try:
            kept = _kept(load_result(run_dir[0]))
        except Exception:  # noqa: BLE001 - interrupted before result.json was complete
            kept = ""
        raise _fail(f"interrupted; {kept or 'nothing had finished'}; result.json, report.md "
                    f"and run.log are in {run_dir[0]}", 130) from None
    _print_summary(result)
    if save_results is not None:
        from icml.results import ResultsError, make_table, write

        try:
            path = write(save_results, [make_table(t.title, t.columns, t.rows)
                                        for t in result.tables],
                         command="icml " + shlex.join(sys.argv[1:]), plugin=slug, seeds=[seed],
                         quick=None, threads=result.threads, clock=clock,
                         metrics=result.metrics)
        except (ResultsError, OSError) as exc:
            raise _fail(f"--save-results {save_results}: {exc}", 1) from None
        typer.echo(f"results file: {path}", err=True)


def _kept(result) -> str:  # noqa: ANN001
    """What a failed or interrupted run still recorded, in words."""
    if not result.partial:
        return ""
    parts = []
    if result.metrics:
        parts.append(f"{len(result.metrics)} metric(s)")
    rows = sum(len(t.rows) for t in result.tables)
    if rows:
        parts.append(f"{rows} table row(s)")
    return ("kept " + " and ".join(parts) + " recorded before it stopped") if parts else ""


def _print_summary(result) -> None:  # noqa: ANN001
    from rich.markup import escape
    from rich.table import Table

    def cell(v: object) -> str:
        return f"{v:.4g}" if isinstance(v, float) else escape(str(v))

    con = _console()
    for t in result.tables:
        table = Table(*map(escape, map(str, t.columns)), title=escape(t.title),
                      title_justify="left")
        for row in t.rows:
            table.add_row(*map(cell, row))
        con.print(table)
    if result.metrics and not result.tables:
        table = Table("metric", "value", title="metrics", title_justify="left")
        for k, v in result.metrics.items():
            table.add_row(escape(k), cell(v))
        con.print(table)
    total = result.timings.get("total_s")
    con.print(f"{result.plugin} {result.capability}: {result.status}"
              + (f" in {total:.1f} s" if total is not None else "")
              + f" -> {result.run_dir}/result.json, report.md", markup=False)


@app.command()
def reproduce(
    slug: Annotated[Optional[str], typer.Argument(
        help="The plugin's slug (`core`: the repository's own benchmarks); omit with --all."
    )] = None,
    tables: Annotated[Optional[list[str]], typer.Argument(
        help="Results files to rerun (names under plugins/SLUG/results, .json optional); "
             "default: all.")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Only the files marked quick (each "
                                        "plugin's default-run table at least).")] = False,
    all_: Annotated[bool, typer.Option("--all", help="Every installed plugin.")] = False,
    threads: Annotated[Optional[int], typer.Option(
        help="Torch threads for the reruns (ICML_THREADS), where the command names none.")
    ] = None,
    raw: Annotated[bool, typer.Option("--raw", help="Demand bit-equal raw values (same "
                                      "machine checks), not equality as shown.")] = False,
    write: Annotated[bool, typer.Option("--write", help="Accept the reruns: overwrite the "
                                        "results files and re-render the README tables.")
                     ] = False,
    record_machine: Annotated[bool, typer.Option(
        "--record-machine", help="On a machine other than a file's (CPU model, kernel flags), "
        "write a rerun that differs as this machine's reference copy (results/machines/KEY/); "
        "later reruns here compare with it. Read the differences first: the main file stays "
        "the README's evidence.")] = False,
) -> None:
    """Rerun the commands behind a plugin's README tables and compare with the committed
    results files; prints every cell that differs. Exit 1 when any differs or fails."""
    from rich.markup import escape
    from rich.table import Table

    from icml.reproduce import reproduce as do_reproduce
    from icml.results import ResultsError

    if threads is not None and threads < 1:
        raise _fail(f"--threads must be >= 1, got {threads}", 2)
    if all_ == (slug is not None):
        raise _fail("name one plugin, or pass --all", 2)
    if write and record_machine:
        raise _fail("--write and --record-machine exclude each other", 2)
    slugs = [r.slug for r in _host().all_records] if all_ else [slug]
    con = _console()
    outcomes = []
    for s in slugs:
        try:
            outcomes += do_reproduce(s, tables or (), quick=quick, threads=threads, raw=raw,
                                     write=write, record_machine=record_machine,
                                     echo=lambda m: typer.echo(m, err=True))
        except ResultsError as exc:
            raise _fail(str(exc), 2) from None
    for o in outcomes:
        if o.diffs:
            table = Table("table", "row", "column", "committed", "rerun", "allowed",
                          title=escape(f"{o.slug} {o.file}: {len(o.diffs)} cell(s) differ"),
                          title_justify="left")
            for d in o.diffs:
                table.add_row(*map(escape, d.as_row()))
            con.print(table)
            if o.message:
                con.print(f"{o.slug} {o.file}: {o.message}", markup=False)
        elif o.message:
            con.print(f"{o.slug} {o.file}: {o.message}", markup=False)
    for o in outcomes:
        con.print(f"[{o.status}] {o.slug} {o.file} ({o.wall_s:.0f} s)", markup=False)
    bad = [o for o in outcomes if o.status != "ok"]
    con.print(f"{len(outcomes) - len(bad)} reproduced, {len(bad)} not"
              + (" (files rewritten)" if write else ""), markup=False)
    raise typer.Exit(1 if bad and not write else 0)


@app.command()
def sweep(
    slug: Annotated[str, typer.Argument(help="The plugin's slug (see `icml list`).")],
    capability: CapabilityArg = None,
    grid: Annotated[list[str], typer.Option(
        "--grid", "-g", help="A config key and its values: key=v1,v2 (repeatable; the sweep "
        "is the cartesian product).")] = [],  # noqa: B006
    seeds: Annotated[str, typer.Option(help="Seeds: 0-4, or 0,1,5.")] = "0",
    out: Annotated[Path, typer.Option("--out", "-o", help="The sweep's folder (rerun the "
                                      "same command to resume).")] = Path("sweeps"),
    set_: Annotated[list[str], typer.Option(
        "--set", "-s", help="Override one config key in every cell: key=value.")
    ] = [],  # noqa: B006
    config: Annotated[Optional[Path], typer.Option(
        "--config", "-c", help="TOML file with config keys.")] = None,
    backend: Annotated[str, typer.Option(help="local (a process pool) or ray.")] = "local",
    workers: Annotated[Optional[int], typer.Option(
        help="Cells at a time (default: the core count; ray: the cluster's CPUs / threads)."
    )] = None,
    threads: Annotated[Optional[int], typer.Option(
        help="Torch threads per cell (default: max(1, cores // workers)).")] = None,
    address: Annotated[Optional[str], typer.Option(
        help="Ray cluster to join (ray://host:10001 or host:6379; default: RAY_ADDRESS, "
             "else a local Ray).")] = None,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda, cuda:1, ...")] = "auto",
    dtype: Annotated[str, typer.Option(help="float32, bfloat16, float16, float64")] = "float32",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No line per cell.")] = False,
) -> None:
    """Run a plugin over a grid of config values and seeds (each cell one `icml run`), then
    aggregate with bootstrap CIs into sweep.json and report.md. Resumable; exit 1 if a cell
    failed."""
    import shlex

    from icml.config import ConfigError
    from icml.loader import PluginLoadError, UnknownPluginError
    from icml.sweep import SweepInterrupted
    from icml.sweep import sweep as do_sweep

    def progress(cell, done: int, total: int) -> None:  # noqa: ANN001
        if quiet:
            return
        took = f" in {cell.wall_s:.1f} s" if cell.wall_s is not None and not cell.reused else ""
        why = f": {cell.error}" if cell.error and cell.status != "ok" else ""
        typer.echo(f"[{done}/{total}] {cell.name}: {cell.status}"
                   + (" (already finished)" if cell.reused else took) + why, err=True)

    try:
        result = do_sweep(slug, capability, grid=grid, seeds=seeds, out=out, backend=backend,
                          workers=workers, threads=threads, device=device, dtype=dtype,
                          overrides=set_, config_file=config, address=address,
                          modules=list(_state["modules"]), on_cell=progress)  # type: ignore
    except (ConfigError, UnknownPluginError) as exc:
        raise _fail(str(exc), 2) from None
    except PluginLoadError as exc:
        raise _fail(str(exc), 1) from None
    except SweepInterrupted as exc:
        raise _fail(f"{exc}: icml {shlex.join(sys.argv[1:])}", 130) from None
    con = _console()
    con.print(result.report.read_text(encoding="utf-8"), markup=False)
    bad = [c for c in result.cells if c.status != "ok"]
    con.print(f"{len(result.cells) - len(bad)} of {len(result.cells)} cells ok -> "
              f"{result.path}, {result.report}", markup=False)
    raise typer.Exit(1 if bad else 0)


@app.command()
def render(
    slug: Annotated[str, typer.Argument(help="The plugin's slug, or `core` for the "
                                        "repository's own benchmarks (the root README).")],
    check: Annotated[bool, typer.Option("--check", help="Only report; exit 1 if any README "
                                        "table differs from its results file.")] = False,
) -> None:
    """Render a plugin's README tables from its results files (the blocks between
    `<!-- results: FILE -->` and `<!-- /results -->`)."""
    from icml.results import ResultsError, readme_of, readme_problems, render_readme, results_dir

    try:
        rdir = results_dir(slug)
    except ResultsError as exc:
        raise _fail(str(exc), 2) from None
    readme = readme_of(rdir)
    pending: list[str] = []
    problems = readme_problems(readme, rdir, pending=pending) if check else \
        render_readme(readme, rdir)
    for p in problems:
        typer.echo(p)
    if check:
        for p in pending:
            typer.echo(f"(pending) {p}")
        raise typer.Exit(1 if problems else 0)
    typer.echo(f"{readme}: {len(problems)} block(s) re-rendered")


@app.command()
def new(
    slug: Annotated[str, typer.Argument(help="New plugin's slug: lowercase, digits, '-'.")],
    directory: Annotated[Path, typer.Option("--dir", "-d", help="Parent folder.")] = Path("."),
    title: Annotated[str, typer.Option(help="The paper's title.")] = "",
) -> None:
    """Scaffold a plugin that installs and passes the conformance kit unchanged."""
    from icml.scaffold import ScaffoldError, scaffold

    try:
        path = scaffold(slug, directory, title=title)
    except ScaffoldError as exc:
        raise _fail(str(exc), 2) from None
    typer.echo(f"created {path}")
    typer.echo(f"next: pip install -e {path} && pytest {path}/tests && icml run {slug}")


@app.command()
def doctor(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Check the environment: Python, torch, CUDA, installed plugins and their load status."""
    from icml.doctor import diagnose

    report = diagnose(_host(require_modules=False))
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        raise typer.Exit(0 if report["healthy"] else 1)
    con = _console()
    for k, v in report["environment"].items():
        con.print(f"{k}: {v}")
    con.print("packaged pretrained models (icml.models.load_pretrained):")
    for m in report["pretrained"]:
        state = (f"cached in {m['cache_dir']}" if m["cached"] else
                 "installed, converted on first load") if m["installed"] else "not installed"
        con.print(f"  {m['name']} ({m['distribution']}): {state}", markup=False)
        if m.get("problem"):
            con.print(f"      {m['problem']}", markup=False)
    con.print(f"plugins ({len(report['plugins'])}):")
    for p in report["plugins"]:
        mark = "ok" if p["status"] == "ok" else p["status"].upper()
        con.print(f"  [{mark}] {p['slug']} {p['version']} ({p['distribution']})", markup=False)
        if p["status"] != "ok":
            con.print(f"      {p['error']}", markup=False)
            if p["fix"]:
                con.print(f"      fix: {p['fix']}", markup=False)
        for w in p["warnings"]:
            con.print(f"      warning: {w}", markup=False)
        if p.get("traceback"):
            con.print(p["traceback"], markup=False)
    raise typer.Exit(0 if report["healthy"] else 1)


def _click_exceptions():  # noqa: ANN202 - typer >= 0.22 vendors click as typer._click
    try:
        from typer._click import exceptions
    except ImportError:
        from click import exceptions
    return exceptions


def main() -> None:
    """The console script: typer's usage errors (an unknown command, ``--seed abc``) become one
    ``error:`` line with exit status 2, like every other bad input."""
    errors = _click_exceptions()
    try:
        code = app(standalone_mode=False)
    except errors.UsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `icml`: the help, as always
            exc.show()
            sys.exit(exc.exit_code)
        hint = ""
        if exc.ctx is not None and exc.ctx.command_path:
            hint = f" (see `{exc.ctx.command_path} --help`)"
        typer.echo(f"error: {exc.format_message()}{hint}", err=True)
        sys.exit(2)
    except typer.Abort:  # Ctrl-C outside a run (a prompt, plugin discovery)
        typer.echo("error: interrupted", err=True)
        sys.exit(130)
    except errors.ClickException as exc:
        typer.echo(f"error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":  # pragma: no cover
    main()
