"""Flower deployment mode: the Flower app folder for ``flwr run``, a loopback launcher that
starts a SuperLink and N SuperNodes on this machine (for tests, benchmarks and a first try),
and :func:`run_on_flower`, which runs a :class:`~icml_het_cpflora.flower.FlowerRun` on either
Flower runtime and returns what :func:`~icml_het_cpflora.simulate` returns. (This module
imports :mod:`icml_het_cpflora.flower`, never the other way round.)

On several machines the same three commands run on different hosts (see the README):
``flower-superlink`` on the server, ``flower-supernode --superlink <server>:<port>
--node-config 'partition-id=<i> num-partitions=<n>'`` on each client, and ``flwr run <app>
<connection>`` from anywhere that reaches the SuperLink.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from icml_het_cpflora.adapters import (
    adapter_name,
    attach_client_adapters,
    resolve_target_modules,
    write_adapter,
)
from icml_het_cpflora.flower import (
    RESULT_FILE,
    FlowerResult,
    FlowerRun,
    _payload_adapter,
    run_flower_simulation,
)

APP_NAME = "het-cpflora-flower"


def _toml_value(v: bool | int | float | str) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(v)  # a TOML basic string


def write_app_dir(path: str | Path, run: FlowerRun) -> Path:
    """Write a Flower app folder (``pyproject.toml``) whose ServerApp and ClientApp are this
    plugin's (``icml_het_cpflora.flower:server_app`` / ``client_app``) and whose
    ``[tool.flwr.app.config]`` is ``run``. The plugin must be installed on every node."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    cfg = "\n".join(f"{k} = {_toml_value(v)}" for k, v in run.to_run_config().items())
    (path / "pyproject.toml").write_text(f"""[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "{APP_NAME}"
version = "1.0.0"
description = "Het-CPFLoRA on Flower (apps from the installed icml-het-cpflora)"
license = "Apache-2.0"
dependencies = []

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "icml"

[tool.flwr.app.components]
serverapp = "icml_het_cpflora.flower:server_app"
clientapp = "icml_het_cpflora.flower:client_app"

[tool.flwr.app.config]
{cfg}
""")
    (path / "README.md").write_text("Het-CPFLoRA Flower app: `flwr run . <connection>`.\n")
    return path


def loopback_problem() -> str | None:
    """Why this machine cannot run Flower locally (both runtimes talk over 127.0.0.1: Ray
    for the simulation, gRPC between SuperLink and SuperNodes), or None. Without a working
    loopback interface (a container started with ``unshare -n``, say) they retry forever."""
    try:
        with socket.socket() as srv:
            srv.bind(("127.0.0.1", 0))
            srv.listen(1)
            with socket.create_connection(srv.getsockname(), timeout=5):
                pass
    except OSError as exc:
        return (f"no working loopback interface (127.0.0.1: {exc}); Flower's runtimes need "
                "it: bring up 'lo' or use backend=inprocess")
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TcpRecorder:
    """A loopback TCP proxy that forwards ``listen_port`` to ``target_port`` and keeps every
    byte in both directions (``to_server``, ``to_client``): what crosses the network between
    SuperNodes and the SuperLink."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.to_server = bytearray()
        self.to_client = bytearray()
        self._lock = threading.Lock()
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", self.port))
        self._sock.listen(64)
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, sink: bytearray) -> None:
        try:
            while chunk := src.recv(65536):
                with self._lock:
                    sink.extend(chunk)
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            threading.Thread(target=self._pipe, args=(client, server, self.to_server),
                             daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, self.to_client),
                             daemon=True).start()

    def close(self) -> None:
        self._stop = True
        self._sock.close()


class LoopbackDeployment:
    """A SuperLink and ``num_supernodes`` SuperNodes (``partition-id`` 0..n-1) as local
    processes, each with its own ``FLWR_HOME`` under ``workdir`` as if on its own machine.
    ``record=True`` routes the SuperNodes through a :class:`TcpRecorder`. Use as a context
    manager; :meth:`run` submits a run with ``flwr run`` and waits for it."""

    def __init__(self, num_supernodes: int, workdir: str | Path, *, record: bool = False,
                 startup_timeout: float = 120.0) -> None:
        self.n = num_supernodes
        self.workdir = Path(workdir)
        self.record = record
        self.startup_timeout = startup_timeout
        self.procs: list[subprocess.Popen[bytes]] = []
        self.recorder: TcpRecorder | None = None
        self.port = 0
        self.bin = Path(sys.executable).parent

    def _exe(self, name: str) -> str:
        exe = self.bin / name
        if not exe.exists():
            raise FileNotFoundError(f"{exe} not found: install flwr in this environment "
                                    "(pip install \"icml-het-cpflora[flower]\")")
        return str(exe)

    def _start(self, name: str, args: list[str], home: Path) -> None:
        home.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "FLWR_HOME": str(home)}
        log = open(self.workdir / f"{name}.log", "wb")  # noqa: SIM115 - kept for the process
        self.procs.append(subprocess.Popen([self._exe(args[0]), *args[1:]], env=env,
                                           stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True))

    def __enter__(self) -> LoopbackDeployment:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self._start("superlink", ["flower-superlink", "--insecure", "--port", str(self.port),
                                  "--database", str(self.workdir / "superlink.db"),
                                  "--disable-runtime-dependency-installation"],
                    self.workdir / "superlink-home")
        self._wait_port(self.port)
        fleet = self.port
        if self.record:
            self.recorder = TcpRecorder(self.port)
            fleet = self.recorder.port
        for i in range(self.n):
            self._start(f"supernode{i}", ["flower-supernode", "--insecure", "--superlink",
                                          f"127.0.0.1:{fleet}", "--port", str(free_port()),
                                          "--node-config",
                                          f"partition-id={i} num-partitions={self.n}"],
                        self.workdir / f"supernode{i}-home")
        home = self.workdir / "user-home"
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text(f'[superlink]\ndefault = "loopback"\n\n'
                                          f'[superlink.loopback]\naddress = '
                                          f'"127.0.0.1:{self.port}"\ninsecure = true\n')
        return self

    def _wait_port(self, port: int) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.procs[-1].poll() is not None:
                raise RuntimeError(f"flower-superlink exited: {self.log('superlink')[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.3)
        raise TimeoutError(f"the SuperLink did not open port {port}")

    def log(self, name: str) -> str:
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def run(self, run: FlowerRun, *, timeout: float = 900.0) -> FlowerResult:
        """Write the app folder, ``flwr run`` it against the SuperLink, wait; the result is
        the ServerApp's ``flower_result.json`` in ``run.out_dir``."""
        if not run.out_dir:
            raise ValueError("set FlowerRun.out_dir: the ServerApp writes its result there")
        app = write_app_dir(self.workdir / "app", run)
        out = Path(run.out_dir) / RESULT_FILE
        out.unlink(missing_ok=True)
        env = {**os.environ, "FLWR_HOME": str(self.workdir / "user-home")}
        cmd = [self._exe("flwr"), "run", str(app), "loopback", "--stream"]
        proc = subprocess.run(cmd, env=env, capture_output=True, timeout=timeout)
        (self.workdir / "flwr-run.log").write_bytes(proc.stdout + proc.stderr)
        if not out.exists():
            tail = (proc.stdout + proc.stderr).decode(errors="replace")[-3000:]
            raise RuntimeError(f"the Flower run left no {RESULT_FILE} (exit {proc.returncode})"
                               f":\n{tail}")
        return FlowerResult.read(run.out_dir)

    def __exit__(self, *exc: Any) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, 15)
                except ProcessLookupError:
                    pass
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, 9)
        if self.recorder is not None:
            self.recorder.close()


def run_on_flower(base: Any, run: FlowerRun, *, backend: str = "simulation",
                  workdir: str | Path | None = None) -> Any:
    """Run ``run`` on Flower (``backend="simulation"``: the Ray runtime; ``"loopback"``:
    deployment mode with local processes under ``workdir``) and return a
    :class:`~icml_het_cpflora.simulator.SimulationResult` like :func:`simulate`'s: ``base``
    (the model the nodes load, e.g. from ``task_kwargs["model_path"]``) wrapped with every
    client's final adapter as saved by its node, and Flower's byte counts and timings. Zero
    rounds start no Flower processes: the adapters stay at their (seeded) init, as in the
    simulator. Without a working loopback interface it raises ``RuntimeError`` at once."""
    import copy

    import torch

    from icml_het_cpflora.simulator import SimulationResult

    if backend not in ("simulation", "loopback"):
        raise ValueError(f"backend={backend!r}: use 'simulation' or 'loopback'")
    if not run.out_dir:
        raise ValueError("set FlowerRun.out_dir: the nodes save their final adapters there")
    strategy = run.make_strategy()
    specs = strategy.ranks(run.specs())
    targets = resolve_target_modules(run.lora.target_modules, run.num_clients)
    model = attach_client_adapters(copy.deepcopy(base), specs, targets, alpha=run.lora.alpha,
                                   dropout=run.lora.dropout, seed=run.seed,
                                   init_from=[0] * run.num_clients if strategy.common_init
                                   else None)
    if run.federation.rounds == 0:
        return SimulationResult(model=model, specs=specs)
    problem = loopback_problem()
    if problem:
        raise RuntimeError(problem)
    if backend == "simulation":
        result = run_flower_simulation(run).result
    else:
        with LoopbackDeployment(run.num_clients, workdir or Path(run.out_dir) / "deploy") as dep:
            result = dep.run(run)
    for i in range(run.num_clients):
        flat = torch.load(Path(run.out_dir) / f"client{i}.pt")
        write_adapter(model, adapter_name(i), _payload_adapter(flat))
    return SimulationResult(model=model, specs=specs, bytes_up=result.bytes_up,
                            bytes_down=result.bytes_down, losses=result.losses,
                            round_seconds=result.round_seconds,
                            participants=result.participants)
