"""The Flower backend against the in-process simulator: same seed, same adapters, losses and
bytes (bit for bit: every random draw is seeded per client and per round on both sides), and
the personal factors never in the bytes Flower sends. Skips without flwr (Ray for the
simulation runtime): pip install -e "./plugins/het-cpflora[test,flower-simulation]"."""

import sys
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("flwr", minversion="1.42",
                    reason="the Flower backend needs flwr>=1.42 (extra [flower])")

from flwr.app import Context, MessageType, RecordDict  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402
from icml_het_cpflora import (  # noqa: E402
    FederationConfig,
    HetCPFLoRAConfig,
    StrategyConfig,
    read_adapter,
    simulate,
    split_lora,
)
from icml_het_cpflora.flower import (  # noqa: E402
    FlowerRun,
    client_step,
    from_array_record,
    make_server_app,
    synthetic_task,
    to_array_record,
)
from icml_het_cpflora.subspace import LoRAFactors  # noqa: E402

TASK = {"hidden_size": 32, "num_layers": 2, "pretrain_steps": 0, "train_size": 16,
        "test_size": 4}


def _run(tmp_path, rounds=2, **kw):
    base = {"r_shared": [2, 3], "r_personal": [2, 1],
            "federation": FederationConfig(rounds=rounds, local_steps=3, lr=1e-2, batch_size=8),
            "task_kwargs": TASK, "num_threads": 1, "out_dir": str(tmp_path / "out")}
    return FlowerRun(**{**base, **kw})


def _inprocess(run):
    """The simulator on the same task: one base model, the nodes' datasets."""
    parts = [synthetic_task(i, run.num_clients, run.seed, **run.task_kwargs)
             for i in range(run.num_clients)]
    res = simulate(parts[0][0], [d for _, d in parts], run.specs(), run.make_strategy(),
                   run.federation, run.lora, seed=run.seed)
    return res, [read_adapter(res.model, res.adapter(i)) for i in range(run.num_clients)]


def _saved(run, i):
    flat = torch.load(f"{run.out_dir}/client{i}.pt")
    mods = {k.rsplit("|", 1)[0] for k in flat}
    return {m: LoRAFactors(flat[f"{m}|A"], flat[f"{m}|B"]) for m in mods}


def _assert_same_run(run, result, res, ref):
    for i in range(run.num_clients):
        got = _saved(run, i)
        assert set(got) == set(ref[i])
        for m in got:
            assert torch.equal(got[m].A, ref[i][m].A) and torch.equal(got[m].B, ref[i][m].B)
    assert result.losses == res.losses
    assert result.bytes_up == res.bytes_up and result.bytes_down == res.bytes_down
    assert result.participants == res.participants


def _windows(t, width=32):
    """Non-zero ``width``-byte slices of a tensor's raw bytes (a slice that straddles a
    chunk boundary of Flower's serialisation is lost, so counts are compared with slack)."""
    b = t.detach().contiguous().numpy().tobytes()
    return [b[k:k + width] for k in range(0, len(b) - width + 1, width) if any(b[k:k + width])]


def _found(parts, blob):
    wins = [w for t in parts for w in _windows(t)]
    assert wins, "nothing to look for"
    return sum(w in blob for w in wins) / len(wins)


def test_run_config_round_trip_and_errors(tmp_path):
    run = _run(tmp_path, strategy="het-cpflora", strategy_config=StrategyConfig(
        het_cpflora=HetCPFLoRAConfig(weighting="num_samples")))
    cfg = run.to_run_config()
    assert all(isinstance(v, (bool, int, float, str)) for v in cfg.values())
    assert FlowerRun.from_run_config(cfg) == run
    assert run.make_strategy().weighting == "num_samples"
    with pytest.raises(ValueError, match="unknown Flower run_config keys"):
        FlowerRun.from_run_config({**cfg, "num-round": 3})
    with pytest.raises(ValueError, match="one rank per client"):
        _run(tmp_path, r_personal=[1])
    with pytest.raises(ValueError, match="unknown strategy"):
        _run(tmp_path, strategy="fedavg")
    with pytest.raises(ValueError, match="module:function"):
        _run(tmp_path, task="synthetic_task")


def test_array_record_round_trip_is_bit_exact():
    g = torch.Generator().manual_seed(0)
    payload = {"m|A_s": torch.randn(3, 5, generator=g),
               "m|B_s": torch.randn(4, 3, generator=g).to(torch.bfloat16)}
    back = from_array_record(to_array_record(payload))
    assert set(back) == set(payload)
    for k, t in payload.items():
        assert back[k].dtype == t.dtype and torch.equal(back[k], t)


def test_client_without_partition_id_is_a_clear_error(tmp_path):
    run = _run(tmp_path)
    # outside a Flower run a Message cannot be built; the check comes before it is read
    msg = SimpleNamespace(content=RecordDict({"arrays": to_array_record({})}),
                          metadata=SimpleNamespace(message_type=MessageType.TRAIN))
    ctx = Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={})
    with pytest.raises(ValueError, match="partition-id"):
        client_step(msg, ctx, run)
    ctx = Context(run_id=1, node_id=1, node_config={"partition-id": 5}, state=RecordDict(),
                  run_config={})
    with pytest.raises(ValueError, match="outside 0..1"):
        client_step(msg, ctx, run)


def _spy_client_app(run, spy_dir):
    """The plugin's client step, plus a local record (test only) of what each node holds
    after training and what it uploads, to search the server's bytes for."""
    app = ClientApp()

    def step(message, context):
        reply = client_step(message, context, run)
        if message.metadata.message_type == MessageType.TRAIN:
            pid = int(context.node_config["partition-id"])
            rnd = int(message.content["config"]["server-round"])
            flat = from_array_record(context.state["adapter"])
            mods = {k.rsplit("|", 1)[0] for k in flat}
            adapter = {m: LoRAFactors(flat[f"{m}|A"], flat[f"{m}|B"]) for m in mods}
            split = split_lora(adapter, run.specs()[pid])
            torch.save({"personal": [t for f in split.personal.values() for t in (f.A, f.B)],
                        "upload": list(from_array_record(reply.content["arrays"]).values())},
                       f"{spy_dir}/r{rnd}_c{pid}.pt")
        return reply

    app.train()(step)
    app.evaluate()(step)
    return app


def test_simulation_runtime_matches_inprocess_and_keeps_personal_local(tmp_path):
    pytest.importorskip("ray", reason="Flower's simulation runtime needs flwr[simulation]")
    import ray.cloudpickle
    from flwr.simulation import run_simulation

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    run = _run(tmp_path)
    spy = tmp_path / "spy"
    spy.mkdir()
    holder = {}
    run_simulation(make_server_app(run, capture=True, holder=holder),
                   _spy_client_app(run, spy), num_supernodes=2,
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                                   "init_args": {"num_cpus": 2, "include_dashboard": False,
                                                 "object_store_memory": 100 * 1024 ** 2}})
    strategy = holder["strategy"]
    res, ref = _inprocess(run)
    _assert_same_run(run, strategy.result, res, ref)
    # Flower's serialisation carries more than the tensors (headers, ids, npy headers)
    assert all(w > b for rw, rb in zip(strategy.result.wire_up, strategy.result.bytes_up)
               for w, b in zip(rw, rb))
    sent, received = b"".join(strategy.sent), b"".join(strategy.received)
    records = [torch.load(p) for p in sorted(spy.glob("r*_c*.pt"))]
    assert len(records) == run.federation.rounds * run.num_clients
    personal = [t for r in records for t in r["personal"]]
    uploads = [t for r in records for t in r["upload"]]
    assert _found(uploads, received) > 0.9          # the search finds what is sent ...
    assert _found(personal, received + sent) == 0.0  # ... and no personal factor is


@pytest.mark.slow
def test_deployment_on_loopback_matches_inprocess_and_wire_has_no_personal(tmp_path):
    from icml_het_cpflora.flower_deploy import LoopbackDeployment

    run = _run(tmp_path)
    with LoopbackDeployment(2, tmp_path / "deploy", record=True) as dep:
        result = dep.run(run, timeout=600)
        wire_up, wire_down = bytes(dep.recorder.to_server), bytes(dep.recorder.to_client)
    res, ref = _inprocess(run)
    _assert_same_run(run, result, res, ref)
    finals = [split_lora(_saved(run, i), run.specs()[i]) for i in range(run.num_clients)]
    shared = [t for s in finals for f in s.shared.values() for t in (f.A, f.B)]
    personal = [t for s in finals for f in s.personal.values() for t in (f.A, f.B)]
    # the last downloads (the final shared factors) crossed the wire; the personal never did
    assert _found(shared, wire_down) > 0.9
    assert _found(personal, wire_up + wire_down) == 0.0


def _dropping_client_app(run, drop_round, drop_client):
    """The plugin's client step, except that one node fails in one round."""
    app = ClientApp()

    def step(message, context):
        rnd = int(message.content["config"]["server-round"])
        if (message.metadata.message_type == MessageType.TRAIN and rnd == drop_round
                and int(context.node_config["partition-id"]) == drop_client):
            raise RuntimeError("simulated drop-out")
        return client_step(message, context, run)

    app.train()(step)
    app.evaluate()(step)
    return app


def test_simulation_runtime_drop_out_completes_the_round_like_the_simulator(tmp_path):
    pytest.importorskip("ray", reason="Flower's simulation runtime needs flwr[simulation]")
    import ray.cloudpickle
    from flwr.simulation import run_simulation

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    run = _run(tmp_path, rounds=3)
    holder = {}
    run_simulation(make_server_app(run, holder=holder), _dropping_client_app(run, 2, 1),
                   num_supernodes=2,
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                                   "init_args": {"num_cpus": 2, "include_dashboard": False,
                                                 "object_store_memory": 100 * 1024 ** 2}})
    result = holder["strategy"].result
    # the simulator with client 1 absent from round 2 (index 1) ends in the same state
    parts = [synthetic_task(i, 2, run.seed, **run.task_kwargs) for i in range(2)]
    res = simulate(parts[0][0], [d for _, d in parts], run.specs(), run.make_strategy(),
                   run.federation, seed=run.seed,
                   participation=lambda t: [0] if t == 1 else [0, 1])
    assert result.participants == res.participants == [[0, 1], [0], [0, 1]]
    for i in range(2):
        got, ref = _saved(run, i), read_adapter(res.model, res.adapter(i))
        assert all(torch.equal(got[m].A, ref[m].A) and torch.equal(got[m].B, ref[m].B)
                   for m in ref)
    assert [[x for x in r if x == x] for r in result.losses] == \
        [[x for x in r if x == x] for r in res.losses]
    assert result.bytes_up == res.bytes_up
    # Flower re-sends client 1 the download its failed round never applied; the simulator
    # delivered it at once, so that one entry differs by exactly that payload
    assert result.bytes_down[1][1] == res.bytes_down[0][1] > 0 == res.bytes_down[1][1]
    assert [r[0] for r in result.bytes_down] == [r[0] for r in res.bytes_down]


def test_two_nodes_claiming_one_partition_is_a_clear_error(tmp_path):
    from icml_het_cpflora.flower import PerNodeStrategy

    def reply(node, pid):
        return SimpleNamespace(has_error=lambda: False,
                               content={"metrics": {"partition-id": pid}},
                               metadata=SimpleNamespace(src_node_id=node))

    strategy = PerNodeStrategy(_run(tmp_path))
    assert set(strategy._replies([reply(11, 0), reply(12, 1)])) == {0, 1}
    with pytest.raises(ValueError, match="claim partition-id 0"):
        strategy._replies([reply(11, 0), reply(12, 0)])


def test_job_backend_flower_simulation_gives_the_inprocess_table(tmp_path):
    """`icml run het-cpflora --set backend=flower-simulation`: same accuracies and bytes."""
    pytest.importorskip("ray", reason="Flower's simulation runtime needs flwr[simulation]")
    import logging

    from icml_het_cpflora.config import TrainConfig
    from icml_het_cpflora.job import _setup, run_strategy

    import icml

    small = {"r_shared": [2, 1], "r_personal": [1, 1],
             "federation": FederationConfig(rounds=2, local_steps=2), "pretrain_steps": 2,
             "train_size": 8, "test_size": 4, "hidden_size": 32, "strategies": ["het-cpflora"]}
    outs = {}
    for backend in ("inprocess", "flower-simulation"):
        ctx = icml.RunContext(out_dir=tmp_path / backend, seed=0, show_progress=False,
                              logger=logging.getLogger("test"))
        cfg = TrainConfig(**small, backend=backend)
        outs[backend] = run_strategy(ctx, cfg, _setup(ctx, cfg), "het-cpflora")
    a, b = outs["inprocess"], outs["flower-simulation"]
    assert a["arms"] == b["arms"] and a["bytes_per_round"] == b["bytes_per_round"] > 0


def test_without_loopback_flower_backends_are_refused_at_once(tmp_path, monkeypatch):
    """Without a working 127.0.0.1 Flower's runtimes retried forever; now the job refuses
    the backend with a one-line config error before any Flower process starts."""
    import logging
    import socket

    from icml_het_cpflora.config import TrainConfig
    from icml_het_cpflora.flower_deploy import loopback_problem
    from icml_het_cpflora.job import _federate

    import icml

    def no_lo(self, addr):
        raise OSError(99, "Cannot assign requested address")

    monkeypatch.setattr(socket.socket, "bind", no_lo)
    assert "loopback" in loopback_problem()
    ctx = icml.RunContext(out_dir=tmp_path, seed=0, show_progress=False,
                          logger=logging.getLogger("test"))
    for backend in ("flower-simulation", "flower-loopback"):
        with pytest.raises(icml.ConfigError, match="config key 'backend'.*loopback") as err:
            _federate(ctx, TrainConfig(backend=backend), {}, "het-cpflora")
        assert "\n" not in str(err.value)


def test_zero_rounds_on_flower_are_the_adapters_at_init(tmp_path):
    """rounds=0 is a valid config (FlowerRun used to demand rounds >= 1, so the config error
    became a failed run): no Flower process, the simulator's adapters at init."""
    from icml_het_cpflora.flower_deploy import run_on_flower

    run = _run(tmp_path, rounds=0)
    base, _ = synthetic_task(0, run.num_clients, run.seed, **run.task_kwargs)
    res = run_on_flower(base, run, backend="loopback")
    assert res.bytes_up == [] and res.round_seconds == []
    ref, ads = _inprocess(run)
    for i in range(run.num_clients):
        got = read_adapter(res.model, res.adapter(i))
        assert all(torch.equal(got[m].A, ads[i][m].A) and torch.equal(got[m].B, ads[i][m].B)
                   for m in got)


@pytest.mark.slow
def test_instruct_task_on_flower_simulation_matches_inprocess(tmp_path):
    """The ROUGE study's task (one instruction category per client) through Flower's
    simulation runtime ends with the in-process simulator's adapters, losses and bytes."""
    pytest.importorskip("ray", reason="Flower's simulation runtime needs flwr[simulation]")
    from icml_het_cpflora.flower import run_flower_simulation
    from icml_het_cpflora.instruct import instruct_task

    run = _run(tmp_path, task="icml_het_cpflora.instruct:instruct_task",
               task_kwargs={"hidden_size": 32, "train_size": 8, "test_size": 2},
               federation=FederationConfig(rounds=2, local_steps=2, lr=1e-2, batch_size=4))
    result = run_flower_simulation(run).result
    parts = [instruct_task(i, run.num_clients, run.seed, **run.task_kwargs)
             for i in range(run.num_clients)]
    res = simulate(parts[0][0], [d for _, d in parts], run.specs(), run.make_strategy(),
                   run.federation, run.lora, seed=run.seed)
    ref = [read_adapter(res.model, res.adapter(i)) for i in range(run.num_clients)]
    assert len(ref) == run.num_clients == 2  # two clients, one instruction category each
    _assert_same_run(run, result, res, ref)
