"""The Flower backend: the same strategies as the in-process simulator, run by Flower
(``flwr`` >= 1.20 Message API) as a ``ServerApp`` and a ``ClientApp``.

- The server side is a Flower ``Strategy`` (:class:`PerNodeStrategy`) that wraps one of our
  strategies and sends **each node its own arrays** (Het-CPFLoRA re-factorises the aggregate to
  every client's own r_s, so there is no single global model to broadcast).
- The client side keeps its whole adapter, personal factors included, in ``context.state``
  (which stays on the SuperNode); only the strategy's upload (for Het-CPFLoRA: A_s, B_s) goes
  into the reply.
- Round t's training message carries the client's download of round t-1 (nothing in round 1);
  the last round's downloads go out in one evaluate message that the clients apply and save.
- Every random draw is seeded as in :func:`icml_het_cpflora.simulate` (per client, per round),
  so a Flower run gives the simulator's adapters for the same seed.

``flwr`` is an optional dependency: ``pip install "icml-het-cpflora[flower]"`` (and
``flwr[simulation]``, i.e. Ray, for :func:`run_flower_simulation`).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from logging import INFO
from pathlib import Path
from typing import Any

try:
    from flwr.app import (
        Array,
        ArrayRecord,
        ConfigRecord,
        Context,
        Message,
        MessageType,
        MetricRecord,
        RecordDict,
    )
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import Strategy as FlowerStrategy
except ImportError as exc:  # pragma: no cover - exercised only without flwr
    raise ImportError(f"the Flower backend needs flwr ({exc}); install it with "
                      "`pip install \"icml-het-cpflora[flower]\"` (and `flwr[simulation]` "
                      "for the simulation runtime)") from None

from icml.config import build_config, to_dict
from icml_het_cpflora.adapters import (
    adapter_name,
    attach_client_adapters,
    read_adapter,
    resolve_target_modules,
    write_adapter,
)
from icml_het_cpflora.config import FederationConfig, LoRAConfig, StrategyConfig
from icml_het_cpflora.ranks import ClientRankSpec
from icml_het_cpflora.strategies import Payload, Strategy, make_strategy, payload_bytes
from icml_het_cpflora.subspace import Adapter, LoRAFactors

RESULT_FILE = "flower_result.json"
_BF16 = "#bf16"


# --------------------------------------------------------------------------- settings


_SECTIONS = {"strategy_config": StrategyConfig, "federation": FederationConfig,
             "lora": LoRAConfig}


@dataclass
class FlowerRun:
    """Everything both sides of a Flower run need; it travels as Flower's ``run_config``
    (lists, dicts and config sections as JSON strings), so a deployment is configured from one
    place. The settings are the job's own config sections, as they are: ``federation``
    (rounds, local steps, lr, batch size), ``lora`` and ``strategy_config`` (the strategies'
    settings; ``strategy`` names the one to run).

    ``task`` is ``"module:function"``; the function is called on every node as
    ``fn(partition_id, num_partitions, seed, **task_kwargs)`` and returns ``(base_model,
    ClientDataset)`` for that node (see :func:`synthetic_task`). ``out_dir`` is where the
    ServerApp writes ``flower_result.json`` and each ClientApp its final adapter
    ``client<i>.pt`` (on its own machine); empty = nothing written. ``num_threads`` (0 =
    leave torch's setting alone) is applied on the server and on every node: the server's
    aggregation must use the thread count the reference ran with for bit-equal results
    (MKL may pick a different reduction order under load otherwise)."""

    r_shared: list[int]
    r_personal: list[int]
    strategy: str = "het-cpflora"
    strategy_config: StrategyConfig = field(default_factory=StrategyConfig)
    federation: FederationConfig = field(default_factory=FederationConfig)
    lora: LoRAConfig = field(default_factory=LoRAConfig)
    seed: int = 0
    task: str = "icml_het_cpflora.flower:synthetic_task"
    task_kwargs: dict[str, Any] = field(default_factory=dict)
    out_dir: str = ""
    num_threads: int = 0
    node_timeout: float = 600.0

    def __post_init__(self) -> None:
        if len(self.r_shared) != len(self.r_personal) or not self.r_shared:
            raise ValueError(f"r_shared ({len(self.r_shared)}) and r_personal "
                             f"({len(self.r_personal)}) must list one rank per client")
        self.specs()
        self.make_strategy()
        if ":" not in self.task:
            raise ValueError(f"task={self.task!r} must be 'module:function'")

    @property
    def num_clients(self) -> int:
        return len(self.r_shared)

    def specs(self) -> list[ClientRankSpec]:
        """The clients' rank splits as configured."""
        return [ClientRankSpec(int(s), int(p)) for s, p in zip(self.r_shared, self.r_personal)]

    def make_strategy(self) -> Strategy:
        return make_strategy(self.strategy, self.strategy_config, self.lora)

    def to_run_config(self) -> dict[str, bool | int | float | str]:
        """Flower ``run_config``: scalars as they are, lists, dicts and config sections as JSON
        strings."""
        out: dict[str, bool | int | float | str] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name in _SECTIONS:
                v = to_dict(v)
            out[f.name.replace("_", "-")] = json.dumps(v) if isinstance(v, (list, dict)) else v
        return out

    @classmethod
    def from_run_config(cls, cfg: dict[str, Any]) -> FlowerRun:
        """Inverse of :meth:`to_run_config` (unknown keys are an error naming them)."""
        names = {f.name.replace("_", "-"): f for f in dataclasses.fields(cls)}
        unknown = sorted(set(cfg) - set(names))
        if unknown:
            raise ValueError(f"unknown Flower run_config keys {unknown}; allowed: "
                             f"{sorted(names)}")
        kw: dict[str, Any] = {}
        for key, value in cfg.items():
            f = names[key]
            is_json = f.name in _SECTIONS or any(t in str(f.type) for t in ("list", "dict"))
            kw[f.name] = json.loads(value) if is_json and isinstance(value, str) else value
            if f.name in _SECTIONS:
                kw[f.name] = build_config(_SECTIONS[f.name], kw[f.name], prefix=f"{f.name}.")
        return cls(**kw)


# --------------------------------------------------------------------------- transport


def to_array_record(payload: Payload) -> ArrayRecord:
    """A flat ``{name: tensor}`` payload as an ArrayRecord (bfloat16 travels bit-exact as
    int16, its key marked ``#bf16``)."""
    import torch

    rec = ArrayRecord()
    for k, t in payload.items():
        t = t.detach().cpu().contiguous()
        if t.dtype == torch.bfloat16:
            k, t = k + _BF16, t.view(torch.int16)
        rec[k] = Array.from_numpy_ndarray(t.numpy())
    return rec


def from_array_record(rec: ArrayRecord, device: Any = "cpu") -> Payload:
    """Inverse of :func:`to_array_record`."""
    import torch

    out: Payload = {}
    for k, arr in rec.items():
        t = torch.from_numpy(arr.numpy().copy())
        if k.endswith(_BF16):
            k, t = k[: -len(_BF16)], t.view(torch.bfloat16)
        out[k] = t.to(device)
    return out


def _adapter_payload(adapter: Adapter) -> Payload:
    out: Payload = {}
    for m, f in adapter.items():
        out[f"{m}|A"], out[f"{m}|B"] = f.A, f.B
    return out


def _payload_adapter(payload: Payload) -> Adapter:
    mods = {k.rsplit("|", 1)[0] for k in payload}
    return {m: LoRAFactors(payload[f"{m}|A"], payload[f"{m}|B"]) for m in mods}


def serialized_bytes(message: Message) -> bytes:
    """The bytes Flower serialises for a message's content: every object of its
    content-addressed tree (records, arrays, array chunks), deflated, concatenated. These are
    the objects a SuperNode and the SuperLink push and pull."""
    from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects

    objs = get_all_nested_objects(message.content)
    return b"".join(obj.deflate() for obj in objs.values())


# --------------------------------------------------------------------------- tasks


_TASK_CACHE: dict[str, tuple[Any, Any]] = {}


def synthetic_task(partition_id: int, num_partitions: int, seed: int, *,
                   hidden_size: int = 64, num_layers: int = 2, pretrain_steps: int = 300,
                   digits: int = 4, train_size: int = 96, test_size: int = 64,
                   own_share: float = 0.8, model_path: str = "",
                   device: str = "cpu") -> tuple[Any, Any]:
    """The default study's base model and this node's training set. The base model is
    ``model_path`` (a ``save_pretrained`` folder, e.g. written by the launcher) when given,
    else the tiny Llama pre-trained in-process exactly as ``icml run het-cpflora`` does."""
    import torch
    from transformers import AutoModelForCausalLM

    from icml.models import byte_tokenizer, tiny_causal_lm
    from icml_het_cpflora.task import pretrain, synthetic_clients

    tok = byte_tokenizer()
    if model_path:
        base = AutoModelForCausalLM.from_pretrained(model_path).eval()
    else:
        base = tiny_causal_lm("llama", seed=seed, hidden_size=hidden_size,
                              num_layers=num_layers, num_heads=4, num_kv_heads=2)
        if pretrain_steps:
            pretrain(base, tok, steps=pretrain_steps, length=digits, seed=seed)
    train, _ = synthetic_clients(tok, num_partitions, seed=seed, digits=digits,
                                 train_size=train_size, test_size=test_size,
                                 own_share=own_share, device=device)
    torch.manual_seed(seed)
    return base.to(device), train[partition_id]


def load_task(run: FlowerRun, partition_id: int) -> tuple[Any, Any]:
    """Call ``run.task`` for one node (cached per process; a fresh model copy each call)."""
    import copy

    key = json.dumps([run.task, run.task_kwargs, run.seed, partition_id, run.num_clients])
    if key not in _TASK_CACHE:
        mod, _, fn = run.task.partition(":")
        try:
            func = getattr(importlib.import_module(mod), fn)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"task={run.task!r} cannot be loaded ({exc}); give "
                             "'module:function' importable on every node") from None
        _TASK_CACHE.clear()
        _TASK_CACHE[key] = func(partition_id, run.num_clients, run.seed, **run.task_kwargs)
    base, data = _TASK_CACHE[key]
    return copy.deepcopy(base), data


# --------------------------------------------------------------------------- client


def _partition(context: Context, run: FlowerRun) -> int:
    try:
        pid = int(context.node_config["partition-id"])
    except (KeyError, ValueError, TypeError):
        raise ValueError("this SuperNode has no integer node_config 'partition-id': start it "
                         "with --node-config 'partition-id=<i> num-partitions=<n>'") from None
    if not 0 <= pid < run.num_clients:
        raise ValueError(f"partition-id {pid} is outside 0..{run.num_clients - 1} (the run "
                         f"has {run.num_clients} clients)")
    return pid


def client_step(message: Message, context: Context, run: FlowerRun) -> Message:
    """One ClientApp call: restore the node's adapter (shared and personal) and sampler from
    ``context.state``, apply the server's arrays, then train and upload (train message) or
    save the final adapter (evaluate message)."""
    import torch

    from icml_het_cpflora.simulator import client_seeds, local_train, round_seed

    if run.num_threads:
        torch.set_num_threads(run.num_threads)
    pid = _partition(context, run)
    strat = run.make_strategy()
    specs = strat.ranks(run.specs())
    spec, name = specs[pid], adapter_name(pid)
    base, data = load_task(run, pid)
    targets = resolve_target_modules(run.lora.target_modules, run.num_clients)
    model = attach_client_adapters(base, [spec], targets, alpha=run.lora.alpha,
                                   dropout=run.lora.dropout, seed=run.seed, client_ids=[pid],
                                   init_from=[0 if strat.common_init else pid])
    state = context.state
    if "adapter" in state:
        write_adapter(model, name, _payload_adapter(from_array_record(state["adapter"])))
    gen = torch.Generator().manual_seed(client_seeds(run.seed, pid)[1])
    if "sampler" in state:
        gen.set_state(from_array_record(state["sampler"])["state"])
    payload = from_array_record(message.content["arrays"], model.device)
    if payload:
        write_adapter(model, name, strat.download(read_adapter(model, name), payload, spec))
    metrics: dict[str, int | float] = {"partition-id": pid, "num-examples": len(data)}
    upload: Payload = {}
    if message.metadata.message_type == MessageType.TRAIN:
        t = int(message.content["config"]["server-round"]) - 1
        torch.manual_seed(round_seed(run.seed, t, pid))
        fed = run.federation
        metrics["loss"] = local_train(model, name, data, steps=fed.local_steps, lr=fed.lr,
                                      batch_size=fed.batch_size, train_A=strat.train_A,
                                      generator=gen, regularizer=strat.regularizer(spec))
        upload = strat.upload(read_adapter(model, name), spec)
    elif run.out_dir:
        Path(run.out_dir).mkdir(parents=True, exist_ok=True)
        torch.save(_adapter_payload(read_adapter(model, name)),
                   Path(run.out_dir) / f"client{pid}.pt")
    state["adapter"] = to_array_record(_adapter_payload(read_adapter(model, name)))
    state["sampler"] = to_array_record({"state": gen.get_state()})
    content = RecordDict({"arrays": to_array_record(upload), "metrics": MetricRecord(metrics)})
    return Message(content, reply_to=message)


def make_client_app(run: FlowerRun | None = None) -> ClientApp:
    """A ClientApp for ``run``, or (``None``) one that reads the run from ``run_config``."""
    app = ClientApp()

    def _run(context: Context) -> FlowerRun:
        return run if run is not None else FlowerRun.from_run_config(dict(context.run_config))

    @app.train()
    def train(message: Message, context: Context) -> Message:
        return client_step(message, context, _run(context))

    @app.evaluate()
    def evaluate(message: Message, context: Context) -> Message:
        return client_step(message, context, _run(context))

    return app


# --------------------------------------------------------------------------- server


@dataclass
class FlowerResult:
    """Per round, per client: tensor bytes (as the simulator counts them) and serialised
    bytes (what Flower pushes) up and down, local losses, participants and wall time."""

    bytes_up: list[list[int]] = field(default_factory=list)
    bytes_down: list[list[int]] = field(default_factory=list)
    wire_up: list[list[int]] = field(default_factory=list)
    wire_down: list[list[int]] = field(default_factory=list)
    losses: list[list[float]] = field(default_factory=list)
    participants: list[list[int]] = field(default_factory=list)
    round_seconds: list[float] = field(default_factory=list)
    total_seconds: float = 0.0

    def write(self, out_dir: str | Path) -> Path:
        path = Path(out_dir) / RESULT_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(dataclasses.asdict(self), indent=1))
        return path

    @classmethod
    def read(cls, out_dir: str | Path) -> FlowerResult:
        return cls(**json.loads((Path(out_dir) / RESULT_FILE).read_text()))


class PerNodeStrategy(FlowerStrategy):
    """A Flower strategy that runs one of our strategies: it learns each node's client index
    from its replies, aggregates with ``strategy.aggregate`` and sends every node **its own**
    download. A node whose reply is missing or an error is left out of that round (the round
    completes with the others); its last download is re-sent until it answers.

    ``capture=True`` keeps the serialised bytes of every message sent and received
    (``sent``, ``received``) for inspection."""

    def __init__(self, run: FlowerRun, *, capture: bool = False) -> None:
        self.run = run
        self.strategy = run.make_strategy()
        self.specs = self.strategy.ranks(run.specs())
        self.node_of: dict[int, int] = {}       # client index -> node id
        self.pending: dict[int, Payload] = {}   # client index -> download not yet delivered
        self.result = FlowerResult()
        self.capture = capture
        self.sent: list[bytes] = []
        self.received: list[bytes] = []
        self._t0 = 0.0
        self._round_start = 0.0

    # -- helpers
    def _wait_for_nodes(self, grid: Grid) -> list[int]:
        deadline = time.monotonic() + self.run.node_timeout
        while len(nodes := sorted(grid.get_node_ids())) < self.run.num_clients:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(nodes)} of {self.run.num_clients} SuperNodes "
                                   f"connected within {self.run.node_timeout} s")
            time.sleep(0.2)
        return nodes

    def _messages(self, grid: Grid, server_round: int, kind: str) -> list[Message]:
        nodes = self._wait_for_nodes(grid)
        client_of = {n: i for i, n in self.node_of.items()}
        out = []
        n = self.run.num_clients
        down, wire = [0] * n, [0] * n
        for node in nodes:
            i = client_of.get(node)
            payload = self.pending.get(i, {}) if i is not None else {}
            content = RecordDict({"arrays": to_array_record(payload),
                                  "config": ConfigRecord({"server-round": server_round})})
            msg = Message(content, dst_node_id=node, message_type=kind)
            ser = serialized_bytes(msg)
            if i is not None:
                down[i], wire[i] = payload_bytes(payload), len(ser)
            if self.capture:
                self.sent.append(ser)
            out.append(msg)
        if server_round > 1 or kind == MessageType.EVALUATE:
            # the downloads produced in the previous round travel now; book them there
            self.result.bytes_down.append(down)
            self.result.wire_down.append(wire)
        return out

    def _replies(self, replies: Iterable[Message]) -> dict[int, Message]:
        got = {}
        for msg in replies:
            if msg.has_error():
                continue
            i = int(msg.content["metrics"]["partition-id"])
            if i in got:
                raise ValueError(f"two SuperNodes ({self.node_of.get(i)} and "
                                 f"{msg.metadata.src_node_id}) claim partition-id {i}: give "
                                 "each SuperNode its own --node-config 'partition-id=<i>'")
            self.node_of[i] = msg.metadata.src_node_id
            got[i] = msg
            if self.capture:
                self.received.append(serialized_bytes(msg))
        # replies come in arrival order; aggregate in partition order, as the simulator does,
        # so that float sums do not depend on which node finished first
        return dict(sorted(got.items()))

    # -- the Flower Strategy interface
    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        if server_round == 1:
            self._t0 = time.perf_counter()
        self._round_start = time.perf_counter()
        return self._messages(grid, server_round, MessageType.TRAIN)

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        got = self._replies(replies)
        n = self.run.num_clients
        uploads = {i: from_array_record(m.content["arrays"]) for i, m in got.items()}
        num = {i: int(m.content["metrics"]["num-examples"]) for i, m in got.items()}
        losses = [float("nan")] * n
        up, wire = [0] * n, [0] * n
        for i, m in got.items():
            losses[i] = float(m.content["metrics"]["loss"])
            up[i], wire[i] = payload_bytes(uploads[i]), len(serialized_bytes(m))
        if uploads:
            downloads = self.strategy.aggregate(uploads, {i: self.specs[i] for i in uploads},
                                                num)
            for i in got:
                self.pending[i] = downloads.get(i, {})
        self.result.bytes_up.append(up)
        self.result.wire_up.append(wire)
        self.result.losses.append(losses)
        self.result.participants.append(sorted(got))
        self.result.round_seconds.append(time.perf_counter() - self._round_start)
        mean = [v for v in losses if v == v]
        return None, MetricRecord({"loss": sum(mean) / len(mean)}) if mean else None

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord,
                           config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        if server_round != self.run.federation.rounds:
            return []
        return self._messages(grid, server_round, MessageType.EVALUATE)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]
                           ) -> MetricRecord | None:
        got = self._replies(replies)
        if server_round == self.run.federation.rounds:
            for i in got:
                self.pending.pop(i, None)
            self.result.total_seconds = time.perf_counter() - self._t0
        return None

    def summary(self) -> None:
        from flwr.supercore import log

        log(INFO, "\t├── het-cpflora strategy: %s, %d clients, ranks %s", self.strategy.name,
            self.run.num_clients, [(s.r_shared, s.r_personal) for s in self.specs])


def serve(grid: Grid, run: FlowerRun, *, capture: bool = False) -> PerNodeStrategy:
    """The ServerApp's body: run ``run.federation.rounds`` rounds; write the result to
    ``run.out_dir``."""
    if run.num_threads:
        import torch

        torch.set_num_threads(run.num_threads)
    strategy = PerNodeStrategy(run, capture=capture)
    strategy.start(grid, ArrayRecord(), num_rounds=run.federation.rounds,
                   timeout=run.node_timeout)
    if run.out_dir:
        strategy.result.write(run.out_dir)
    return strategy


def make_server_app(run: FlowerRun | None = None, *, capture: bool = False,
                    holder: dict[str, Any] | None = None) -> ServerApp:
    """A ServerApp for ``run`` (or read from ``run_config`` when ``None``). The finished
    :class:`PerNodeStrategy` is put in ``holder["strategy"]`` when a dict is given."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        r = run if run is not None else FlowerRun.from_run_config(dict(context.run_config))
        strategy = serve(grid, r, capture=capture)
        if holder is not None:
            holder["strategy"] = strategy

    return app


def run_flower_simulation(run: FlowerRun, *, capture: bool = False,
                          backend_config: dict[str, Any] | None = None) -> PerNodeStrategy:
    """Run ``run`` in Flower's simulation runtime (Ray), one SuperNode per client; returns
    the finished :class:`PerNodeStrategy` (its ``result``, and captured bytes)."""
    if importlib.util.find_spec("ray") is None:
        raise ImportError("Flower's simulation runtime needs Ray: pip install "
                          "\"icml-het-cpflora[flower-simulation]\" (flwr[simulation])")
    from flwr.simulation import run_simulation

    holder: dict[str, Any] = {}
    cfg = backend_config or {"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                             "init_args": {"num_cpus": 2, "include_dashboard": False,
                                           "object_store_memory": 100 * 1024 ** 2}}
    run_simulation(make_server_app(run, capture=capture, holder=holder),
                   make_client_app(run), num_supernodes=run.num_clients, backend_config=cfg)
    if "strategy" not in holder:
        raise RuntimeError("the Flower simulation ended without finishing the ServerApp; "
                           "see Flower's log above")
    return holder["strategy"]


# module-level apps for deployment (`flwr run`): the run comes from run_config
server_app = make_server_app()
client_app = make_client_app()
