"""What a run folder holds, as `tinyformer info` prints it (and the playground's side panel shows it)."""

from __future__ import annotations

import json

from tinyformer import config as cfg
from tinyformer.models import count_parameters
from tinyformer.overrides import toml_value
from tinyformer.runs import Run, best_val
from tinyformer.timeplan import end_step


def describe(run: Run) -> str:
    """Progress, the resolved config as TOML, and the parameter breakdown of a run loaded with its weights."""
    st = run.state
    tps = st.tokens_seen / max(st.train_seconds, 1e-9)
    seen = f"{st.tokens_seen:,} tokens ({tps:,.0f}/s)"
    trained_in = f" in {st.precision}" if st.precision is not None else ""  # runs before train.precision: none
    planned = "" if st.budget is None else f" planned for {st.budget.budget:,.0f} s"  # --time: the plan's steps
    lines = [
        f"run {run.path}: task {run.config.task}, step {st.step}/{end_step(st, run.config.train.max_iters)}{planned}",
        f"best val {run.task.select} {best_val(run):.4f}; {st.train_seconds:.0f} s of training{trained_in}, {seen}",
    ]
    if st.attention is not None:  # runs before model.backend=auto have none
        lines.append(st.attention.line())
    lines += ["", "# resolved config", to_toml(cfg.to_dict(run.config))]
    counted, rows = count_parameters(run.model), run.task.param_breakdown()
    lines.append(format_breakdown(rows, counted) if rows is not None else f"parameters: {counted:,}")
    return "\n".join(lines)


def to_toml(d: dict) -> str:
    """Flat sections of scalars as TOML (a preset can be copied from it)."""
    top = [f"{k} = {toml_value(v) or json.dumps(v)}" for k, v in d.items() if not isinstance(v, dict)]
    parts = ["\n".join(top)]
    for k, v in d.items():
        if isinstance(v, dict):
            body = "\n".join(f"{kk} = {toml_value(vv) or json.dumps(vv, ensure_ascii=False)}" for kk, vv in v.items())
            parts.append(f"[{k}]\n{body}")
    return "\n\n".join(parts)


def format_breakdown(rows: list[tuple[str, str, int, int]], counted: int) -> str:
    total = sum(per * n for _, _, per, n in rows)
    lines = [f"# parameters: {total:,} by formula, {counted:,} counted" + ("" if total == counted else "  (MISMATCH)")]
    for name, formula, per, n in rows:
        times = f"{n} × {per:,}" if n > 1 else f"{per:,}"
        lines.append(f"  {name:<24} {formula:<20} {times:>16} = {per * n:>10,}")
    return "\n".join(lines)
