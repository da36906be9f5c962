"""Benchmark (issue 5's acceptance): interactive n-gram discovery against the static baseline.

A seeded synthetic fleet (devices.synthetic: a Zipf-like vocabulary of 370 words with planted
frequent phrases), two approved analyses with the same policy (like seed_demo's demo.discovery and
demo.discovery-static), and the spec of docs/examples/ngram_discovery.json run through
analyses.adaptive.adaptive_start: three interactive rounds (unigrams, then the extensions of the
frequent prefixes) on one analysis, then three static rounds (every trigram in a count-mean sketch)
on the other, at the same per-round privacy. The run's comparison is read on the fleet's ground
truth.

Everything runs in this process on the embedded default: a throwaway SQLite database and
pfs_web.settings_test (PFS_TASK_MODE "sync"), so each round's tasks, and the advance of the chain,
run inline when the transaction that enqueued them commits; adaptive_start returns when the whole
chain has finished. Each phase is timed by wrapping the services it calls (see ``Profile``). Round
seeds, which seed every device's coins, are drawn from ``--seed`` instead of the OS entropy, so a
run reproduces. Writes bench/results/ngram_discovery.md (or ``--out``).

    .venv/bin/python bench/ngram_discovery.py                       # 1,000,000 devices
    .venv/bin/python bench/ngram_discovery.py --devices 100000 --out /tmp/ngram.md
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import secrets
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SPEC_PATH = ROOT / "docs" / "examples" / "ngram_discovery.json"
DEFAULT_OUT = ROOT / "bench" / "results" / "ngram_discovery.md"
RECALL_TARGET = 0.9
_PROGRESS = ("dispatch", "aggregate", "level record", "ground truth", "static decoding", "comparison")
_START = ("start", "recipe check")  # adaptive_start's own work: the plan check and round 1's recipe


def analysis_specs(fleet: str) -> list[dict]:
    """seed_demo's demo.discovery and demo.discovery-static: the same policy, each its own budget."""
    from analyses.management.commands.seed_demo import DEMO_ANALYSES

    twins = ("demo.discovery", "demo.discovery-static")
    return [{**spec, "fleet": fleet} for spec in DEMO_ANALYSES if spec["identifier"] in twins]


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---------------------------------------------------------------- timing


class Profile:
    """Wraps functions to record their wall time, inclusive and exclusive of wrapped callees.

    In sync mode the chain nests: a round's aggregation commits, its on_commit runs the advance,
    which starts the next round, whose dispatch runs inside... Exclusive ("self") times add up
    without double counting. A call without a round id is charged to the round of its caller.
    """

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.stack: list[dict[str, Any]] = []
        self.results: dict[str, Any] = {}

    def wrap(self, owner: Any, name: str, label: str, *, keep: bool = False) -> None:
        original = getattr(owner, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            parent_round = self.stack[-1]["round"] if self.stack else None
            frame = {"children": 0.0, "round": kwargs.get("round_id", parent_round)}
            self.stack.append(frame)
            start = time.perf_counter()
            try:
                result = original(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - start
                self.stack.pop()
                if self.stack:
                    self.stack[-1]["children"] += elapsed
                self.events.append(
                    {
                        "label": label,
                        "round": frame["round"],
                        "seconds": elapsed,
                        "self": elapsed - frame["children"],
                        "rss": peak_rss_mib(),
                    }
                )
                if label in _PROGRESS:
                    print(
                        f"{time.strftime('%H:%M:%S')} {label} (round {frame['round']}): "
                        f"{elapsed - frame['children']:.1f} s, "
                        f"peak RSS {peak_rss_mib():,.0f} MiB",
                        file=sys.stderr,
                        flush=True,
                    )
            if keep:
                self.results[label] = result
            return result

        setattr(owner, name, wrapper)

    def seconds(self, label: str, round_id: int | None = None, *, inclusive: bool = False) -> float:
        key = "seconds" if inclusive else "self"
        return sum(e[key] for e in self.events if e["label"] == label and (round_id is None or e["round"] == round_id))

    def rss(self, round_id: int) -> float:
        return max((e["rss"] for e in self.events if e["round"] == round_id), default=0.0)


def instrument(profile: Profile, seed: int) -> None:
    from analyses.adaptive import chain, comparison
    from analyses.services import rounds
    from privacy.ngrams import HashedNgramType

    # Round seeds from --seed (rounds draws them with secrets.randbits), so the devices' coins repeat.
    seeded = random.Random(seed)
    rounds.secrets = SimpleNamespace(randbits=seeded.getrandbits, token_hex=secrets.token_hex)

    profile.wrap(chain, "adaptive_start", "start")
    profile.wrap(rounds, "round_dispatch", "dispatch")
    profile.wrap(rounds, "round_shard_run", "devices")
    profile.wrap(rounds, "round_aggregate", "aggregate")
    profile.wrap(chain, "adaptive_advance", "advance")
    profile.wrap(chain, "_level_record", "level record")
    profile.wrap(chain, "_next_ngram_recipe", "next tree")
    profile.wrap(chain, "recipe_create", "recipe check")
    profile.wrap(comparison, "comparison_compute", "comparison")
    profile.wrap(comparison, "ngram_truth", "ground truth", keep=True)
    profile.wrap(comparison, "prefix_tree_estimand", "interactive estimand")
    profile.wrap(HashedNgramType, "top", "static decoding", keep=True)


# ---------------------------------------------------------------- the run


def run(args: argparse.Namespace) -> dict[str, Any]:
    import django

    sys.path.insert(0, str(ROOT))
    os.environ["DJANGO_SETTINGS_MODULE"] = "pfs_web.settings_test"
    django.setup()
    import numpy as np
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from analyses.adaptive import chain
    from analyses.adaptive.levels import pooled
    from analyses.models import AdaptiveRun, Round
    from analyses.services.policy import analysis_approve, analysis_create
    from devices.fleet_io import fleet_create
    from devices.synthetic import TOKENS
    from privacy.ngrams import END_LABEL, HashedNgramType, PrefixTreeType, ngram_text

    spec = json.loads(SPEC_PATH.read_text())
    assert spec["vocabulary"] == list(TOKENS), "the example spec's vocabulary is no longer devices.synthetic.TOKENS"

    call_command("migrate", verbosity=0)
    call_command("migrate", database="helper", verbosity=0)  # the helper's own store (pfs_base.db_router)
    officer = get_user_model().objects.create_user("officer", is_staff=True)
    profile = Profile()
    instrument(profile, args.seed)

    start = time.perf_counter()
    fleet = fleet_create(name="bench", size=args.devices, seed=args.seed, shard_size=args.shard_size)
    fleet_seconds, fleet_rss = time.perf_counter() - start, peak_rss_mib()
    for analysis_spec in analysis_specs(fleet.name):
        analysis_approve(analysis=analysis_create(spec=analysis_spec, owner=officer), officer=officer)

    load_before = os.getloadavg()
    start = time.perf_counter()
    run_ = chain.adaptive_start(spec=spec, user=officer)
    run_seconds = time.perf_counter() - start
    load_after = os.getloadavg()
    run_ = AdaptiveRun.objects.get(pk=run_.pk)
    assert run_.status == AdaptiveRun.Status.FINISHED, f"{run_.status}: {run_.stop_reason}"
    comparison = run_.comparison
    assert comparison and comparison.get("available"), comparison

    # Per round: what it asked and what it cost.
    rounds = []
    for method, entries in (("interactive", run_.levels), ("static", run_.baseline)):
        for number, entry in enumerate(entries, 1):
            round_ = Round.objects.select_related("recipe", "release").get(pk=entry["round"])
            content = round_.release.content
            row = {
                "method": method,
                "round": number,
                "id": round_.pk,
                "buckets": len(content["buckets"]),
                "reports": sum(b["reports"] for b in content["batches"]),
                "epsilon0": round_.recipe.privacy.epsilon0,
                "epsilon": round_.recipe.privacy.epsilon,
                "delta": round_.recipe.privacy.delta,
                "dispatch": profile.seconds("dispatch", round_.pk),
                "devices": profile.seconds("devices", round_.pk),
                "aggregate": profile.seconds("aggregate", round_.pk),
                "level record": profile.seconds("level record", round_.pk),
                # The advance builds and checks the next round's recipe (whichever method it is).
                "next round": profile.seconds("next tree", round_.pk)
                + profile.seconds("recipe check", round_.pk)
                + profile.seconds("advance", round_.pk),
                "rss": profile.rss(round_.pk),
            }
            if method == "interactive":
                row.update(length=entry["length"], leaves=entry["leaves"], kept=len(entry["kept"]))
            row["total"] = sum(row[k] for k in ("dispatch", "devices", "aggregate", "level record", "next round"))
            rounds.append(row)

    # The 20 true trigrams, with each method's estimate wherever it has one (found or not).
    truth = profile.results["ground truth"]
    true_top = truth.top(comparison["top_k"])
    last = Round.objects.select_related("recipe", "release").get(pk=run_.levels[-1]["round"])
    tree = PrefixTreeType.from_json(last.recipe.content["dataTypeContent"][spec["field"]])
    i_estimates, i_variances, i_reports = pooled(last.release.content)
    from devices.ground_truth import prefix_tree_estimand

    i_estimand = prefix_tree_estimand(fleet, tree, now=time.time()) * i_reports / fleet.size
    leaf_index = {leaf: i for i, leaf in enumerate(tree.leaves)}
    extensions = {e: i for i, e in enumerate((END_LABEL, "OOV", *tree.tokens))}

    static_rounds = [Round.objects.select_related("recipe", "release").get(pk=b["round"]) for b in run_.baseline]
    static_pooled = [pooled(r.release.content) for r in static_rounds]
    s_estimates = np.mean([p[0] for p in static_pooled], axis=0)
    s_variances = np.sum([p[1] for p in static_pooled], axis=0) / len(static_pooled) ** 2
    s_reports = float(np.mean([p[2] for p in static_pooled]))
    sketch = HashedNgramType.from_json(static_rounds[0].recipe.content["dataTypeContent"][spec["field"]])
    index = {t: i for i, t in enumerate(sketch.tokens)}
    symbols = np.array([[-2 if t == END_LABEL else index[t] for t in ngram] for ngram in true_top], dtype=np.int64)
    s_decoded, s_errors = sketch.decode(s_estimates, s_variances, symbols)

    found_rows = {row["ngram"]: row for row in comparison["rows"]}
    trigrams = []
    for k, ngram in enumerate(true_top):
        text = ngram_text(spec.get("unit", "word"), ngram)
        leaf = leaf_index.get(tuple(ngram[:-1]))
        interactive = None
        if leaf is not None:
            bucket = 1 + leaf * (len(tree.tokens) + 2) + extensions[ngram[-1]]
            interactive = {
                "estimate": float(i_estimates[bucket]),
                "standard_error": float(np.sqrt(i_variances[bucket])),
                "estimand": float(i_estimand[bucket]),
                "found": found_rows[text]["interactive"] is not None,
            }
        trigrams.append(
            {
                "ngram": text,
                "devices": found_rows[text]["devices"],
                "interactive": interactive,
                "static": {
                    "estimate": float(s_decoded[k]),
                    "standard_error": float(s_errors[k]),
                    "estimand": truth.uniform_reports_of(ngram) * s_reports / fleet.size,
                    "found": found_rows[text]["static"] is not None,
                },
            }
        )

    # How far down the tree the true top-20 survived: their 1-gram and 2-gram prefixes kept at each level.
    survival = []
    for level in run_.levels:
        kept = {tuple(k["tokens"]) for k in level["kept"] if not k["end"]}
        length = level["length"]
        wanted = {tuple(n[:length]) for n in true_top if len(n) > length}
        survival.append({"length": length, "wanted": len(wanted), "kept": len(wanted & kept)})

    # What each method found instead of the true top-20: the true device count and rank of its false positives.
    true_set = set(true_top)

    def devices_of(ngram: tuple[str, ...]) -> int:
        wanted = np.array([-2 if t == END_LABEL else index.get(t, -9) for t in ngram])
        match = np.flatnonzero((truth.ngrams == wanted).all(axis=1))
        return int(truth.devices[match[0]]) if match.size else 0

    def false_positive(ngram: tuple[str, ...], estimate: float, error: float, estimand: float) -> dict:
        devices = devices_of(ngram)
        return {
            "ngram": ngram_text(spec.get("unit", "word"), ngram),
            "estimate": estimate,
            "standard_error": error,
            "estimand": estimand,
            "devices": devices,
            "rank": 1 + int(np.count_nonzero(truth.devices > devices)),
        }

    z_score, top_k = spec["threshold"]["zScore"], comparison["top_k"]

    # Noise-free ceilings: the top-K by each method's estimand, against the top-K by devices.
    candidates = [i for i in range(1, tree.size) if tree.bucket_ngram(i)[1] != "OOV"]
    by_estimand = sorted(candidates, key=lambda i: -i_estimand[i])[:top_k]
    interactive_ceiling = sum(1 for i in by_estimand if (*tree.bucket_ngram(i)[0], tree.bucket_ngram(i)[1]) in true_set)
    uniform_top = np.argsort(-truth.uniform_reports, kind="stable")[:top_k]
    static_ceiling = sum(1 for i in uniform_top if truth.labels(truth.ngrams[i]) in true_set)
    misses = {"interactive": [], "static": []}
    for kept in run_.levels[-1]["kept"][:top_k]:
        ngram = tuple(kept["tokens"])
        if ngram not in true_set:
            bucket = 1 + leaf_index[ngram[:-1]] * (len(tree.tokens) + 2) + extensions[ngram[-1]]
            misses["interactive"].append(
                false_positive(ngram, kept["estimate"], kept["standard_error"], float(i_estimand[bucket]))
            )
    static_found = [t for t in profile.results["static decoding"] if t[1] > z_score * t[2]][:top_k]
    for ngram, estimate, error in static_found:
        if ngram not in true_set:
            estimand = truth.uniform_reports_of(ngram) * s_reports / fleet.size
            misses["static"].append(false_positive(ngram, estimate, error, estimand))

    return {
        "devices": args.devices,
        "seed": args.seed,
        "shard_size": args.shard_size,
        "shards": fleet.shards.count(),
        "spec": spec,
        "fleet_seconds": fleet_seconds,
        "fleet_rss": fleet_rss,
        "run_seconds": run_seconds,
        "start_seconds": sum(e["self"] for e in profile.events if e["round"] is None and e["label"] in _START),
        "comparison_seconds": {
            label: profile.seconds(label)
            for label in ("comparison", "ground truth", "interactive estimand", "static decoding")
        },
        "comparison_rss": max((e["rss"] for e in profile.events if e["label"] == "comparison"), default=0.0),
        "peak_rss_mib": peak_rss_mib(),
        "load": (load_before, load_after),
        "stop_reason": run_.stop_reason,
        "rounds": rounds,
        "comparison": comparison,
        "trigrams": trigrams,
        "survival": survival,
        "false_positives": misses,
        "ceilings": {"interactive": interactive_ceiling, "static": static_ceiling},
        "tree_hits": sum(1 for t in trigrams if t["interactive"] is not None),
    }


# ---------------------------------------------------------------- the report


def machine() -> str:
    from host import describe  # bench/host.py: this script's folder is on sys.path

    return describe(tasks="tasks inline (sync)", memory=True)


def command(args: argparse.Namespace) -> str:
    parts = [".venv/bin/python bench/ngram_discovery.py"]
    if args.devices != 1_000_000:
        parts.append(f"--devices {args.devices}")
    if args.seed != 2022:
        parts.append(f"--seed {args.seed}")
    if args.shard_size != 10_000:
        parts.append(f"--shard-size {args.shard_size}")
    if Path(args.out).resolve() != DEFAULT_OUT:
        parts.append(f"--out {args.out}")
    return " ".join(parts)


def _ci(entry: dict | None) -> str:
    if entry is None:
        return "prefix not in the tree"
    return f"{entry['estimate']:,.0f} ± {1.96 * entry['standard_error']:,.0f}"


def _fraction(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def report(result: dict, args: argparse.Namespace) -> str:
    spec, comparison = result["spec"], result["comparison"]
    interactive, static = comparison["interactive"], comparison["static"]
    rounds = result["rounds"]
    top_k = comparison["top_k"]
    z_score = spec["threshold"]["zScore"]
    by_method = {m: [r for r in rounds if r["method"] == m] for m in ("interactive", "static")}
    epsilon = {m: sum(r["epsilon"] for r in rows) for m, rows in by_method.items()}
    holds_recall = interactive["recall"] >= RECALL_TARGET
    holds_better = interactive["hits"] > static["hits"]
    equal_budget = abs(epsilon["interactive"] - epsilon["static"]) < 1e-9
    holds = holds_recall and holds_better and equal_budget
    privacy = spec["privacy"]
    baseline = spec["baseline"]
    load_before, load_after = result["load"]

    lines = [
        "# N-gram discovery: interactive against static (issue 5's acceptance)",
        "",
        f"Machine: {machine()}. Date: {time.strftime('%Y-%m-%d')}. "
        f"Load average (1, 5, 15 min) before the run {', '.join(f'{x:.2f}' for x in load_before)}, "
        f"after {', '.join(f'{x:.2f}' for x in load_after)}.",
        "",
        f"Reproduce: `{command(args)}` (one process, a throwaway SQLite database, "
        "`pfs_web.settings_test` so tasks run inline; round seeds drawn from `--seed`).",
        "",
        "## Workload",
        "",
        f"- Fleet: {result['devices']:,} synthetic devices (`devices.synthetic`, seed {result['seed']}), "
        f"{result['shards']} shards of {result['shard_size']:,}: a Zipf-like vocabulary of "
        f"{len(spec['vocabulary'])} words (exponent 1.1), Poisson(4) phrases per device, 35% of them one of "
        "ten planted phrases; 60 days of history of which KeyboardNGrams keeps 30.",
        "- Analyses: `demo.discovery` (interactive) and `demo.discovery-static` (baseline), the same "
        "policy, each with its own budget: epsilon 3, 3 reports, delta 1e-5; field `ngrams` "
        "localEpsilon 4, epsilon 3, 3 reports.",
        f"- Spec: `docs/examples/ngram_discovery.json` as is: vocabulary = all {len(spec['vocabulary'])} "
        f"tokens, maxLength {spec['maxLength']}, {privacy['mechanism']} with epsilon0 {privacy['epsilon0']:g} "
        f"per round, epsilon {privacy['epsilonPerRound']:g} per round, delta {privacy['delta']:g}; threshold "
        f"zScore {spec['threshold']['zScore']:g}, maxPerLevel {spec['threshold']['maxPerLevel']}; baseline "
        f"count-mean sketch {baseline['rows']} rows × {baseline['columns']:,} columns, topK {baseline['topK']}.",
        f"- Both methods run {spec['maxLength']} rounds at the same per-round privacy; the static rounds' "
        "sketches are averaged and decoded over every trigram of the vocabulary "
        f"({len(spec['vocabulary']) ** 2 * (len(spec['vocabulary']) + 1):,} candidates).",
        "",
        "## Acceptance",
        "",
        f"Criterion: interactive recovers at least {RECALL_TARGET:.0%} of the true top-{top_k} trigrams, and "
        "finds strictly more of them than the static baseline, at equal total budget.",
        "",
        f"- Interactive recall: {interactive['hits']}/{top_k} = {interactive['recall']:.0%} "
        f"({'≥' if holds_recall else '<'} {RECALL_TARGET:.0%}).",
        f"- Static recall: {static['hits']}/{top_k} = {static['recall']:.0%}; interactive "
        f"{'strictly better' if holds_better else 'not strictly better'}.",
        f"- Total epsilon: interactive {epsilon['interactive']:g}, static {epsilon['static']:g} "
        f"({'equal' if equal_budget else 'NOT equal'}).",
        f"- **The criterion {'holds' if holds else 'does not hold'}.**",
        "",
        f"Interactive stop reason: {result['stop_reason'] or '–'}",
        "",
        "## Results per method",
        "",
        "| | interactive | static |",
        "|---|---:|---:|",
        f"| rounds | {interactive['rounds']} | {static['rounds']} |",
        f"| total epsilon | {epsilon['interactive']:g} | {epsilon['static']:g} |",
        "| buckets per round | "
        + " / ".join(f"{r['buckets']:,}" for r in by_method["interactive"])
        + " | "
        + " / ".join(f"{r['buckets']:,}" for r in by_method["static"])
        + " |",
        f"| n-grams found (cleared z, capped at {top_k}) | {interactive['found']} | {static['found']} |",
        f"| true top-{top_k} found (hits) | {interactive['hits']} | {static['hits']} |",
        f"| recall | {_fraction(interactive['recall'])} | {_fraction(static['recall'])} |",
        f"| precision | {_fraction(interactive['precision'])} | {_fraction(static['precision'])} |",
        f"| mean relative error of the hits' counts | {_fraction(interactive['mean_relative_error'])} "
        f"| {_fraction(static['mean_relative_error'])} |",
        "",
        "Each method is judged against its own estimand: interactive devices report one of their n-grams "
        "whose prefix is in the tree and static devices one of all their n-grams, so an n-gram's expected "
        "count differs between the two; both are computed from the ground truth (and scaled to the "
        "round's reports).",
        "",
        f"True top-{top_k} trigrams whose prefix made it into the level-{spec['maxLength']} tree: "
        f"{result['tree_hits']}/{top_k} (the most interactive can find). Prefixes of the true "
        f"top-{top_k} kept (to extend) at each level: "
        + "; ".join(f"level {s['length']}: {s['kept']}/{s['wanted']}" for s in result["survival"][:-1])
        + ".",
        "",
        f"Noise-free ceilings: had every estimate equalled its estimand, the top-{top_k} of the last tree "
        f"would hold {result['ceilings']['interactive']}/{top_k} of the true top-{top_k}, and the top-{top_k} "
        f"of all trigrams by the static estimand {result['ceilings']['static']}/{top_k}. The true top-{top_k} "
        "ranks n-grams by the devices that typed them, which neither method estimates: a device reports one "
        "n-gram, so a phrase that yields several eligible n-grams splits its weight among them.",
        "",
        "## Timings",
        "",
        f"Fleet creation: {result['fleet_seconds']:.2f} s (peak RSS so far {result['fleet_rss']:,.0f} MiB). "
        f"Plan check and round 1 creation (`adaptive_start` itself): {result['start_seconds']:.2f} s. "
        f"The whole chain, start to comparison: {result['run_seconds']:.1f} s. "
        f"Peak RSS of the process: {result['peak_rss_mib']:,.0f} MiB.",
        "",
        "Seconds per round: dispatch; devices (every shard encodes, privatizes and uploads); aggregate "
        "(both aggregators, debiasing, the release); level record (reading the release into kept "
        "n-grams); next round (building the next tree and checking its recipe and budget). Peak RSS is "
        "the process's peak up to the end of the round.",
        "",
    ]
    header = (
        "| round | n | leaves | buckets | reports | kept | dispatch | devices | aggregate | level record "
        "| next round | total | peak RSS (MiB) |"
    )
    for method in ("interactive", "static"):
        lines += [f"### {method.capitalize()}", "", header, "|---:|---:|---:|---:|---:|---:" + "|---:" * 7 + "|"]
        for r in by_method[method]:
            length = r.get("length", spec["maxLength"])
            leaves = r.get("leaves", "–")
            kept = r.get("kept", "–")
            lines.append(
                f"| {r['round']} | {length} | {leaves} | {r['buckets']:,} | {r['reports']:,} | {kept} | "
                f"{r['dispatch']:.2f} | {r['devices']:.2f} | {r['aggregate']:.2f} | {r['level record']:.2f} | "
                f"{r['next round']:.2f} | {r['total']:.2f} | {r['rss']:,.0f} |"
            )
        lines.append("")
    c = result["comparison_seconds"]
    rest = c["comparison"]
    lines += [
        "### Comparison (after the last static round)",
        "",
        "| ground truth (every trigram of the fleet) | interactive estimand | static decoding (all candidates) "
        "| the rest | total | peak RSS (MiB) |",
        "|---:|---:|---:|---:|---:|---:|",
        f"| {c['ground truth']:.2f} | {c['interactive estimand']:.2f} | {c['static decoding']:.2f} | {rest:.2f} "
        f"| {sum(c.values()):.2f} | {result['comparison_rss']:,.0f} |",
        "",
        f"## The true top-{top_k} trigrams",
        "",
        "Estimates ± 1.96 standard errors, with each method's estimand (the expected count of reports of "
        "that trigram). ✓: among the method's found n-grams. Interactive has an estimate only when the "
        "trigram's prefix is a leaf of its last tree; static decodes every trigram from the averaged sketch.",
        "",
        "| # | trigram | devices | interactive | estimand | found | static | estimand | found |",
        "|---:|---|---:|---:|---:|:-:|---:|---:|:-:|",
    ]
    for k, t in enumerate(result["trigrams"], 1):
        i, s = t["interactive"], t["static"]
        lines.append(
            f"| {k} | {t['ngram'].replace('<', '&lt;').replace('>', '&gt;')} | {t['devices']:,} | {_ci(i)} | "
            f"{'–' if i is None else format(i['estimand'], ',.0f')} | {'✓' if i and i['found'] else ''} | "
            f"{_ci(s)} | {s['estimand']:,.0f} | {'✓' if s['found'] else ''} |"
        )
    lines += [
        "",
        "## What each method found instead",
        "",
        f"The found n-grams outside the true top-{top_k}, with their true device count and rank "
        f"(by devices), each method's estimate ± 1.96 SE and its estimand. Found means: among the "
        f"{top_k} largest estimates that clear {z_score:g} standard errors.",
        "",
    ]
    for method in ("interactive", "static"):
        rows = result["false_positives"][method]
        lines += [f"### {method.capitalize()}: {len(rows)} of {comparison[method]['found']} found", ""]
        if not rows:
            continue
        lines += ["| n-gram | devices | true rank | estimate | estimand |", "|---|---:|---:|---:|---:|"]
        for f in rows:
            lines.append(
                f"| {f['ngram'].replace('<', '&lt;').replace('>', '&gt;')} | {f['devices']:,} | {f['rank']:,} | "
                f"{_ci(f)} | {f['estimand']:,.0f} |"
            )
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", type=int, default=1_000_000, help="size of the synthetic fleet")
    parser.add_argument("--seed", type=int, default=2022, help="seed of the fleet and of the rounds' coins")
    parser.add_argument("--shard-size", type=int, default=10_000, help="devices per shard")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="where to write the results table")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["DATABASE_URL"] = f"sqlite:///{tmp}/bench.sqlite3"
        os.environ.setdefault("SECRET_KEY", "bench")
        result = run(args)
    text = report(result, args)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
