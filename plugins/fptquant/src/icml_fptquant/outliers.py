"""Function-preserving outlier injection: a reproducible hard case for static W4A4KV4.

Real LLMs develop massive activation outliers that a tiny model trained for seconds does not.
This moves weight magnitude around so that the *function is unchanged* but activations get
outlier channels at the places that matter: RMSNorm outputs (q/k/v and gate/up inputs), the
MLP intermediate (down_proj input), keys (per RoPE pair, queries compensate) and values
(o_proj compensates).
"""

from __future__ import annotations

from typing import Any

import torch

from icml_fptquant.arch import check_supported

OUTLIER_SITES = ("norm", "mlp", "key", "value")


def check_sites(sites: Any) -> tuple[str, ...]:
    bad = [s for s in sites if s not in OUTLIER_SITES]
    if bad:
        raise ValueError(f"outlier sites {bad} unknown: use some of {', '.join(OUTLIER_SITES)}")
    return tuple(sites)


@torch.no_grad()
def inject_outliers(model: Any, strength: float = 30.0, channels: int = 2,
                    seed: int = 0, sites: Any = OUTLIER_SITES) -> Any:
    """Scale ``channels`` random channels per site by ``strength`` and compensate exactly.

    ``sites`` picks the outlier kinds: ``norm`` (RMSNorm scales, read by q/k/v and gate/up),
    ``mlp`` (down_proj input), ``key`` (one RoPE pair per KV head) and ``value`` (one value
    channel per KV head). The channel draws do not depend on ``sites``, so a subset injects
    exactly the same outliers as the full set at those sites."""
    sites = check_sites(sites)
    if strength <= 0:
        return model
    geo = check_supported(model)
    gen = torch.Generator().manual_seed(seed)

    def pick(n: int, k: int = channels) -> torch.Tensor:
        return torch.randperm(n, generator=gen)[:min(k, n)]

    a = float(strength)
    for layer in model.model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        for norm, readers in ((layer.input_layernorm, (attn.q_proj, attn.k_proj, attn.v_proj)),
                              (layer.post_attention_layernorm, (mlp.gate_proj, mlp.up_proj))):
            idx = pick(norm.weight.numel())
            if "norm" not in sites:
                continue
            norm.weight[idx] *= a
            for lin in readers:
                lin.weight[:, idx] /= a
        idx = pick(mlp.up_proj.out_features)
        if "mlp" in sites:
            mlp.up_proj.weight[idx] *= a
            if mlp.up_proj.bias is not None:
                mlp.up_proj.bias[idx] *= a
            mlp.down_proj.weight[:, idx] /= a
        dh, half = geo.head_dim, geo.head_dim // 2
        for g in range(geo.kv_heads):
            j = pick(half, 1)
            rows = torch.cat([j, j + half]) + g * dh
            v = pick(dh, 1) + g * dh
            ak = a if "key" in sites else 1.0
            av = a if "value" in sites else 1.0
            attn.k_proj.weight[rows] *= ak
            if attn.k_proj.bias is not None:
                attn.k_proj.bias[rows] *= ak
            attn.v_proj.weight[v] *= av
            if attn.v_proj.bias is not None:
                attn.v_proj.bias[v] *= av
            for h in range(geo.heads):
                if geo.kv_of(h) == g:
                    qrows = rows - g * dh + h * dh
                    attn.q_proj.weight[qrows] /= ak
                    if attn.q_proj.bias is not None:
                        attn.q_proj.bias[qrows] /= ak
                    attn.o_proj.weight[:, v - g * dh + h * dh] /= av
    return model
