"""Issue 49: the hostile trial's cases, rerun through the console script as a user types them.

Each case is one command and the outcome a user must see. The README's Reliability section
lists the same cases (``test_the_readme_lists_every_case``); each plugin's own tests hold the
finer checks (e.g. that the refused value was refused before any training).
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from pathlib import Path

import pytest

from icml.testing import icml_cli, one_line_error

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Case:
    command: str  # as in the README (after `icml run`); {garbled} / {port} are filled in
    exit: int
    says: str  # a fragment of the one-line error (exit 2) or of result.json's error (exit 1)

    @property
    def plugin(self) -> str:
        return self.command.split()[0]


CASES = [
    Case("sarsteer --set alphas=[nan]", 2, "alphas"),
    Case("sarsteer --set steer.alpha=nan", 2, "alpha"),
    Case("sarsteer --set steer.k=41", 2, "exceeds n_fit"),
    Case("sarsteer --set model=/no/such/folder", 2, "model"),
    Case("smart --set supernode_radius=-1", 2, "supernode_radius"),
    Case("smart infer --set model_path={garbled}", 2, "config.json"),
    Case("expo-gs infer --set exposure=inf", 2, "exposure"),
    Case("expo-gs --set n_views=0", 2, "n_views"),
    Case("het-cpflora --set federation.lr=inf", 2, "federation.lr"),
    Case("het-cpflora --set lora.target_modules=[]", 2, "lora.target_modules"),
    Case("het-cpflora --set r_shared=[] --set r_personal=[]", 2, "r_shared"),
    Case("dxpp --set solver=nosuch", 2, "allowed"),
    Case("dr-mmsearch infer --set model={garbled}", 2, "config.json"),
    Case("modality-pairing evaluate --set model_path={garbled}/model.pt", 2, "model_path"),
    Case("xspecmesh --set model=/no/such/folder", 2, "model"),
    Case("dxpp --device mps", 2, "mps"),
    Case("dxpp --seed abc", 2, "--seed"),
    Case("dxpp --threads abc", 2, "--threads"),
    Case("tipex infer --set model=http --set base_url=http://127.0.0.1:{port}/v1 "
         "--set clock=wall --set num_tasks=2 --set n_replicas=1", 1, "cannot connect"),
    Case("bioagent-bench infer --set task=deseq --set agent=cli:/no/such/agent", 1, "agent"),
]


def _installed(slug: str) -> bool:
    from importlib.util import find_spec

    return find_spec(f"icml_{slug.replace('-', '_')}") is not None


def _free_port() -> int:
    with socket.socket() as s:  # bound then closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.command.split("{")[0].strip())
def test_the_trial_case_is_clean(case: Case, tmp_path: Path) -> None:
    if not _installed(case.plugin):
        pytest.skip(f"icml-{case.plugin} is not installed")
    if "mps" in case.command:
        torch = pytest.importorskip("torch")
        if torch.backends.mps.is_available():
            pytest.skip("this machine has MPS")
    garbled = tmp_path / "garbled"
    garbled.mkdir()
    (garbled / "config.json").write_text("{garbage")
    (garbled / "model.pt").write_bytes(b"not a checkpoint")
    command = case.command.format(garbled=garbled, port=_free_port())
    out = tmp_path / "out"
    proc = icml_cli("run", *command.split(), "--out", str(out))
    assert proc.returncode == case.exit, proc.stderr
    if case.exit == 2:
        assert case.says in one_line_error(proc)
    else:
        assert "Traceback" not in proc.stderr, proc.stderr
        (result,) = out.glob("*/result.json")
        data = json.loads(result.read_text())
        assert data["status"] == "failed" and case.says in data["error"], data["error"]


def readme_rows() -> list[str]:
    """The README table's rows, rendered from CASES."""
    rows = []
    for c in CASES:
        shown = c.command.format(garbled="<garbled folder>", port="<closed port>")
        what = (f"exit 2, a one-line `error:` containing `{c.says}`"
                if c.exit == 2 else f"exit 1, `status: failed`, its error contains `{c.says}`")
        rows.append(f"| `icml run {shown}` | {what} |")
    return rows


def test_the_readme_lists_every_case() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    missing = [r for r in readme_rows() if r not in text]
    assert not missing, "README Reliability table lacks (or words differently):\n" + \
        "\n".join(missing)
