"""PPO against the HPA on a fleet task at equal SLO attainment (issue 42's bar).

    .venv-dev/bin/python scripts/fleet_equal_attainment.py  # writes experiments/results/fleet1_equal_attainment.json
    .venv-dev/bin/python scripts/fleet_equal_attainment.py --markdown  # docs/FLEET.md's table of that file
    .venv-dev/bin/python scripts/fleet_equal_attainment.py --task InferenceGym-Fleet1-v2   # fleet1_v2_...json

The HPA trades SLO attainment for GPU-hours through its target [req/s per serving replica] (the
pooled HPA, where a task has one, through its scale). Each value of a baseline's list (STUDIES)
runs on the held-out windows with the keys of PPO's stored evaluation (results/fleet1_v1.json:
`evaluate.evaluation_key(eval_seed)`, episodes 0..N-1), so every episode is paired with PPO's.
Between two targets a and b the HPA's frontier is their mixture: run a on a fraction 1 - w of
the days and b on w, which gives (1 - w) x + w y in expectation of any per-episode quantity x
(under a) and y (under b). The HPA matched to PPO is that mixture of the two neighbouring targets
whose mean attainment equals PPO's; its per-episode GPU-hours
(1 - w) a_i + w b_i are paired with PPO's (Student-t 95 % CI, `fleet.evaluate.paired_ci95`).

The targets are picked here on the held-out days with PPO's attainment known: the most favourable
HPA for this comparison, so a PPO win is conservative. Before anything is paired, the run of the
HPA's chosen target (data/fleet/fleet1_v1_baselines.json) must reproduce the results file's "hpa" rows
(each baseline's chosen value its own rows).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

import numpy as np

from inferencegym_jax import evaluate
from inferencegym_jax.fleet import baselines as fb
from inferencegym_jax.fleet import evaluate as fe
from inferencegym_jax.fleet.tasks import make_fleet

ENV_ID = "InferenceGym-Fleet1-v1"
ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results" / "fleet1_v1.json"
OUT = ROOT / "experiments" / "results" / "fleet1_equal_attainment.json"
# [req/s per serving replica]: the HPA's targets, around the one the task's baselines file chose
# (data/fleet/fleet1_v1_baselines.json: 1.3) and past PPO's attainment on both sides.
TARGETS = [1.0, 1.1, 1.2, 1.25, 1.3, 1.4]
# task -> (PPO's stored evaluation, the study's JSON, {baseline: the values of its number run (LABELS)}).
# Fleet1-v2: from each baseline's chosen value (data/fleet/fleet1_v2_baselines.json: the HPA 1.6, the
# pooled HPA 1.0) down past PPO's held-out attainment (0.9998).
STUDIES = {ENV_ID: (RESULTS, OUT, {"hpa": TARGETS}),
           "InferenceGym-Fleet1-v2": (ROOT / "results" / "fleet1_v2.json",
                                      ROOT / "experiments" / "results" / "fleet1_v2_equal_attainment.json",
                                      {"hpa": [0.8, 0.9, 1.0, 1.2, 1.4, 1.6], "hpa_pooled": [0.5, 0.6, 0.7, 0.8, 1.0]})}
COLUMNS = ("gpu_hours", "slo_attainment")
# baseline -> (the number the study varies, its table's first header, its name in the other headers)
LABELS = {"hpa": ("target", "HPA target (req/s per replica)", "HPA"),
          "hpa_pooled": ("scale", "pooled HPA scale (x capacity per fleet size)", "pooled HPA")}


def run_targets(env_id: str, seed: int, episodes: int, name: str = "hpa") -> dict[float, dict[str, np.ndarray]]:
    """{value: {"gpu_hours", "slo_attainment"}: float64 (N,)} of baseline `name` on the held-out windows."""
    env, params = make_fleet(env_id, split="heldout")
    chosen = fb.load_chosen(env_id)
    number, values = LABELS[name][0], STUDIES[env_id][2][name]
    out = {}
    for value in values:  # the library's evaluation, as the results file's: bit for bit its episodes
        chosen[name] = {number: value}
        controller = fb.make_controllers(params, chosen, fb.load_capacity(env_id))[name]
        res = fe.run_fleet_episodes(env, params, controller, evaluate.evaluation_key(seed), episodes)
        out[value] = {c: np.asarray(getattr(res, c), np.float64) for c in COLUMNS}
        print(f"{name} {number} {value}: {out[value]['gpu_hours'].mean():.1f} GPU-h, "
              f"attainment {out[value]['slo_attainment'].mean():.5f}", flush=True)
    return out


def matched(runs: dict[float, dict[str, np.ndarray]], attainment: float) -> dict:
    """The mixture of two neighbouring targets whose mean attainment is `attainment` (module
    docstring): {"a", "b", "w", "gpu_hours": float64 (N,)}; None when no pair of TARGETS brackets it."""
    order = sorted(runs, key=lambda t: -runs[t]["slo_attainment"].mean())  # most attainment first
    for a, b in zip(order, order[1:], strict=False):
        att_a, att_b = runs[a]["slo_attainment"].mean(), runs[b]["slo_attainment"].mean()
        if att_a >= attainment >= att_b and att_a > att_b:
            w = (att_a - attainment) / (att_a - att_b)
            gpu = (1 - w) * runs[a]["gpu_hours"] + w * runs[b]["gpu_hours"]
            att = (1 - w) * runs[a]["slo_attainment"] + w * runs[b]["slo_attainment"]
            return {"a": a, "b": b, "w": float(w), "gpu_hours": gpu, "slo_attainment": att}
    return None


def family(env_id: str, seed: int, episodes: int, name: str, ppo: dict, stored: dict
           ) -> tuple[list[dict], dict | None, float]:
    """(rows, the mixture matched to PPO's attainment or None, the largest difference of the rerun at
    the chosen value from the results file's rows of `name`) of one baseline's values."""
    number = LABELS[name][0]
    runs = run_targets(env_id, seed, episodes, name)
    chosen = float(fb.load_chosen(env_id)[name][number])
    rerun, kept = runs[chosen], stored["per_episode"][name]
    worst = max(float(np.max(np.abs(rerun[c] - np.asarray(kept[c])))) for c in COLUMNS)
    if worst > 0.0:
        raise RuntimeError(f"{name} at its chosen {number} {chosen} differs from the results file's {name} rows by "
                           f"{worst:.3g}: the episodes are not the stored ones, so nothing can be paired")
    rows = []
    for value, r in sorted(runs.items()):
        d_gpu = fe.paired_ci95(ppo["gpu_hours"], r["gpu_hours"])
        d_att = fe.paired_ci95(ppo["slo_attainment"], r["slo_attainment"])
        rows.append({number: value, "gpu_hours": float(r["gpu_hours"].mean()),
                     "slo_attainment": float(r["slo_attainment"].mean()),
                     "min_attainment": float(r["slo_attainment"].min()),
                     f"ppo_minus_{name}_gpu_h": d_gpu[0], f"ppo_minus_{name}_gpu_h_ci95": d_gpu[1],
                     f"ppo_minus_{name}_attainment": d_att[0], f"ppo_minus_{name}_attainment_ci95": d_att[1]})
    mix = matched(runs, float(ppo["slo_attainment"].mean()))
    match = None
    if mix is not None:
        d_gpu = fe.paired_ci95(ppo["gpu_hours"], mix["gpu_hours"])
        match = {"targets": [mix["a"], mix["b"]], "w": mix["w"], "gpu_hours": float(mix["gpu_hours"].mean()),
                 "slo_attainment": float(mix["slo_attainment"].mean()),
                 f"ppo_minus_{name}_gpu_h": d_gpu[0], f"ppo_minus_{name}_gpu_h_ci95": d_gpu[1]}
    return rows, match, worst


def matched_key(name: str) -> str:
    """The document's key of baseline `name`'s matched mixture ("matched" for the HPA, as v1's file has it)."""
    return "matched" if name == "hpa" else f"matched_{name}"


def measure(env_id: str, seed: int) -> dict:
    """The study's JSON document (see `main`): per baseline `name` its rows (doc[name]), its matched
    mixture (doc[matched_key(name)]) and its rerun's check (doc[f"{name}_rerun_max_abs_diff"])."""
    results = STUDIES[env_id][0]
    stored = json.loads(results.read_text())
    if stored["eval_seed"] != seed or stored["split"] != "heldout":
        raise ValueError(f"--seed={seed}: {results.name} was evaluated with eval_seed={stored['eval_seed']} "
                         f"on split {stored['split']!r}; allowed: --seed={stored['eval_seed']}")
    episodes = int(stored["episodes"])
    ppo = {c: np.asarray(stored["per_episode"]["ppo"][c], np.float64) for c in COLUMNS}
    doc = {
        "what": f"{env_id}: the HPA's GPU-hours and SLO attainment over its target on the held-out windows, "
                f"paired with PPO's stored evaluation ({results.relative_to(ROOT)}); 'matched' is the mixture of "
                "two targets at PPO's mean attainment (scripts/fleet_equal_attainment.py's docstring)",
        "command": "python scripts/fleet_equal_attainment.py",
        "made_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "episodes": episodes, "key": f"evaluate.evaluation_key({seed})",
        "units": "gpu_hours [GPU h per day], slo_attainment [fraction], ci95: Student-t 95 % half-width, paired",
        "results": str(results.relative_to(ROOT)),
        "ppo": {"gpu_hours": float(ppo["gpu_hours"].mean()), "slo_attainment": float(ppo["slo_attainment"].mean())},
    }
    for name in STUDIES[env_id][2]:
        rows, match, worst = family(env_id, seed, episodes, name, ppo, stored)
        doc.update({f"{name}_rerun_max_abs_diff": worst, name: rows, matched_key(name): match})
    return doc


def markdown(doc: dict, name: str = "hpa") -> str:
    """docs/FLEET.md's table of the study for baseline `name` (from its JSON document)."""
    number, header, who = LABELS[name]
    lines = [f"| {header} | GPU-h/day | SLO attainment | PPO - {who}, GPU-h (paired 95 % CI) "
             f"| PPO - {who}, attainment |", "|---|---|---|---|---|"]
    for r in doc[name]:
        lines.append(f"| {r[number]:g} | {r['gpu_hours']:.1f} | {r['slo_attainment']:.4f} "
                     f"| {r[f'ppo_minus_{name}_gpu_h']:+.1f} ± {r[f'ppo_minus_{name}_gpu_h_ci95']:.1f} "
                     f"| {r[f'ppo_minus_{name}_attainment']:+.4f} ± {r[f'ppo_minus_{name}_attainment_ci95']:.4f} |")
    m = doc[matched_key(name)]
    if m is not None:
        a, b = m["targets"]
        lines.append(f"| **mixture of {a:g} and {b:g} (w = {m['w']:.2f}) at PPO's attainment** | {m['gpu_hours']:.1f} "
                     f"| {m['slo_attainment']:.4f} | **{m[f'ppo_minus_{name}_gpu_h']:+.1f} ± "
                     f"{m[f'ppo_minus_{name}_gpu_h_ci95']:.1f}** | 0 |")
    p = doc["ppo"]
    lines.append(f"| PPO ({Path(doc.get('results', RESULTS.name)).name}) | {p['gpu_hours']:.1f} | "
                 f"{p['slo_attainment']:.4f} | | |")
    return "\n".join(lines)


def markdowns(doc: dict) -> str:
    """Every baseline's table of the study (the HPA's first), a blank line between."""
    return "\n\n".join(markdown(doc, name) for name in LABELS if name in doc)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0, help="the evaluation seed of results/fleet1_v1.json")
    ap.add_argument("--markdown", action="store_true", help="print the table of the stored JSON, run nothing")
    ap.add_argument("--task", default=ENV_ID, choices=sorted(STUDIES), help="the fleet task")
    ap.add_argument("--out", default="", help="default: the task's (STUDIES)")
    args = ap.parse_args(argv)
    args.out = args.out or str(STUDIES[args.task][1])
    if args.markdown:
        print(markdowns(json.loads(Path(args.out).read_text())))
        return
    doc = measure(args.task, args.seed)
    doc["command"] = "python scripts/fleet_equal_attainment.py " + " ".join(argv if argv is not None else sys.argv[1:])
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(markdowns(doc))
    print("wrote", args.out)


if __name__ == "__main__":
    main()
