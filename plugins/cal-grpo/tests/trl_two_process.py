"""Run by tests/test_trl_adapter.py under ``accelerate launch --num_processes 2 --cpu``: one
CALGRPOTrainer whose group of 8 is split across two processes (4 rows each). Each process writes
its attempt verdicts, advantages and final weights to ``<out>/rank<r>.pt``."""

import os
import sys

import torch

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def main(out: str) -> None:
    from datasets import Dataset
    from icml_cal_grpo.tasks import ProbeTask
    from icml_cal_grpo.trl_adapter import CALGRPOTrainer
    from trl import GRPOConfig

    from icml.models import byte_tokenizer, tiny_causal_lm

    torch.set_num_threads(1)
    tok = byte_tokenizer()
    model = tiny_causal_lm("qwen2", seed=0, hidden_size=32).train()
    rank = int(os.environ.get("RANK", "0"))
    task = ProbeTask(seed=100 + rank, feedback="!")
    args = GRPOConfig(output_dir=out, num_generations=8, per_device_train_batch_size=4,
                      max_steps=2, learning_rate=3e-3, use_cpu=True, report_to="none",
                      logging_steps=100, save_strategy="no", seed=0, disable_tqdm=True,
                      max_completion_length=16)
    ds = Dataset.from_dict({"prompt": [task.prompt] * 32})
    tr = CALGRPOTrainer(model, args=args, train_dataset=ds, processing_class=tok, verifier=task,
                        rollout_config=task.rollout_config(tok))
    seen = []
    orig = tr._generate_and_score_completions

    def spy(inputs):
        res = orig(inputs)
        spans = [inp["attempt_spans"] for inp in inputs]
        seen.append({"verdicts": [inp["attempt_rewards"] for inp in inputs],
                     "adv": [[float(res["advantages"][i, s]) for s, _ in sp]
                             for i, sp in enumerate(spans)]})
        return res

    tr._generate_and_score_completions = spy
    tr.train()
    w = torch.cat([p.detach().flatten() for p in tr.accelerator.unwrap_model(tr.model)
                   .parameters()])
    torch.save({"rank": tr.accelerator.process_index, "world": tr.accelerator.num_processes,
                "seen": seen, "weights": w}, os.path.join(out, f"rank{rank}.pt"))


if __name__ == "__main__":
    main(sys.argv[1])
