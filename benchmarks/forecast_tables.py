"""The choices and tables of benchmarks/forecast_real.py from its forecasts (its docstring is the
method): the point forecast and the identification rule chosen on the development half, the
interval calibrated there, every figure reported on the half asked for."""

from __future__ import annotations

import json
import sys
from itertools import combinations

import numpy as np
from forecast_real import BASELINES, CANDIDATES, MARGIN  # forecast_real imports this module lazily: no cycle

from scalerl.scaling.calibrate import BINS, TABLE, conformal_quantiles, group_key
from scalerl.scaling.identify import RULES

# a calibration group with fewer dev forecasts takes its identification's pooled quantiles: below 39 the 95%
# conformal quantile is the group's largest score (a departure: 20 before the first run; forecast_real.py)
MIN_GROUP = 39
MIN_SHARE = 0.2  # an identification rule must mark at least this share of the dev forecasts


def err(r: dict, k: str) -> float:
    return r["pred"][k] - r["end"]


def mean_abs(rows: list[dict], k: str) -> float:
    e = np.array([err(r, k) for r in rows])
    e = e[np.isfinite(e)]
    return float(np.abs(e).mean()) if e.size else float("nan")


def choose_point(dev: list[dict]) -> tuple[str, dict]:
    score = {}
    for k in CANDIDATES:
        score[k] = float(np.mean([mean_abs([r for r in dev if r["domain"] == d], k) for d in ("real", "committed")]))
    return min(score, key=score.get), score


def fit_key(point: str) -> str:
    return "sigmoid_r0" if point.endswith("_r0") else "sigmoid"


def within_rate(rows: list[dict], k: str) -> float | None:
    return float(np.mean([abs(err(r, k)) <= MARGIN for r in rows])) if rows else None


def choose_rule(dev: list[dict], point: str) -> tuple[str, dict]:
    fk, scores = fit_key(point), {}
    for rule in RULES:
        marked = [r for r in dev if r["ident"][fk][rule]]
        other = [r for r in dev if not r["ident"][fk][rule]]
        share = len(marked) / len(dev)
        gap = (within_rate(marked, point) or 0) - (within_rate(other, point) or 0)
        scores[rule] = {"share": share, "gap": gap, "marked_within": within_rate(marked, point)}
    ok = [r for r in RULES if scores[r]["share"] >= MIN_SHARE]
    best = max(ok, key=lambda r: scores[r]["gap"]) if ok else max(RULES, key=lambda r: scores[r]["share"])
    return best, scores


def calibrate(dev: list[dict], point: str, rule: str) -> dict:
    fk = fit_key(point)
    n_dom = {d: sum(r["domain"] == d for r in dev) for d in ("real", "committed")}
    z = np.array([err(r, point) * -1 / r["scale"][point] for r in dev])  # (end - forecast) / s
    w = np.array([1.0 / n_dom[r["domain"]] for r in dev])
    ident = np.array([bool(r["ident"][fk][rule]) for r in dev])
    keys = np.array([group_key(bool(r["ident"][fk][rule]), r["h"]) for r in dev])
    groups = {}
    for marked in (True, False):
        pooled = conformal_quantiles(z[ident == marked], w[ident == marked]) if (ident == marked).any() else None
        for b in range(len(BINS) + 1):
            key = group_key(marked, ([0.0] + list(BINS))[b])
            sel = keys == key
            if sel.sum() >= MIN_GROUP:
                lo, hi = conformal_quantiles(z[sel], w[sel])
            elif pooled is not None:
                lo, hi = pooled
            else:
                lo, hi = conformal_quantiles(z, w)
            groups[key] = {"lo": lo, "hi": hi, "n": int(sel.sum())}
    return {
        "point": point,
        "rule": rule,
        "fit_r0": fk == "sigmoid_r0",
        "level": 0.9,
        "bins": list(BINS),
        "h_max": float(max(r["h"] for r in dev)),
        "groups": groups,
        "made_by": "python benchmarks/forecast_real.py --calibrate",
        "dev_forecasts": {d: n for d, n in n_dom.items()},
    }


def interval(r: dict, tab: dict) -> tuple[float, float]:
    fk, point = fit_key(tab["point"]), tab["point"]
    g = tab["groups"][group_key(bool(r["ident"][fk][tab["rule"]]), r["h"])]
    p, s = r["pred"][point], r["scale"][point]
    return max(0.0, p + g["lo"] * s), min(1.0, p + g["hi"] * s)


def cover(rows: list[dict], tab: dict) -> dict:
    if not rows:
        return {"n": 0}
    iv = np.array([interval(r, tab) for r in rows])
    ends = np.array([r["end"] for r in rows])
    boot = np.array([r["boot"] for r in rows], dtype=float)
    return {
        "n": len(rows),
        "covered": float(np.mean((iv[:, 0] <= ends) & (ends <= iv[:, 1]))),
        "width": float(np.median(iv[:, 1] - iv[:, 0])),
        "boot_covered": float(np.mean((boot[:, 0] <= ends) & (ends <= boot[:, 1]))),
        "boot_width": float(np.median(boot[:, 1] - boot[:, 0])),
    }


def ranking(rows: list[dict], tab: dict, cut: float = 0.5) -> dict:
    rows = [r for r in rows if r["cut"] == cut]
    out = {k: [0, 0] for k in (tab["point"], "frozen", "last3", "last", "ruler")}
    called = [0, 0]
    for a, b in combinations(rows, 2):
        if a["group"] != b["group"] or abs(a["end"] - b["end"]) <= MARGIN:
            continue
        truth = a["end"] > b["end"]
        for k in out:
            out[k][0] += (a["pred"][k] > b["pred"][k]) == truth
            out[k][1] += 1
        ia, ib = interval(a, tab), interval(b, tab)
        if ia[0] > ib[1] or ib[0] > ia[1]:
            called[0] += (ia[0] > ib[1]) == truth
            called[1] += 1
    pairs = next(iter(out.values()))[1]
    return {
        "pairs": pairs,
        **{k: v[0] / v[1] if v[1] else None for k, v in out.items()},
        "called": called[1],
        "called_right": called[0] / called[1] if called[1] else None,
    }


def analyse(rows: list[dict]) -> dict:
    dev = [r for r in rows if r["side"] == "dev"]
    point, point_scores = choose_point(dev)
    rule, rule_scores = choose_rule(dev, point)
    tab = calibrate(dev, point, rule)
    return {"point": point, "point_scores": point_scores, "rule": rule, "rule_scores": rule_scores, "table": tab}


def _cell(rows: list[dict], k: str) -> str:
    e = np.array([err(r, k) for r in rows])
    e = e[np.isfinite(e)]
    return f"{np.abs(e).mean():.3f} ({(np.abs(e) <= MARGIN).mean():.0%})" if e.size else "-"


def strata_table(rows: list[dict], tab: dict, title: str) -> list[str]:
    point = tab["point"]
    cols = [point] + [k for k in CANDIDATES if k != point] + list(BASELINES)
    lines = [
        f"### {title}",
        "",
        "mean |error| (share within 0.02); the calibrated 90% interval's coverage and median "
        "width; the parameter bootstrap's beside it",
        "",
        "| stratum | cut | n | " + " | ".join(cols) + " | covered (width) | bootstrap covered (width) |",
        "|" + "---|" * (len(cols) + 5),
    ]
    for st in ("all", "flat", "rising", "fell"):
        for cut in ("all",) + tuple(sorted({r["cut"] for r in rows})):
            sel = [r for r in rows if (st == "all" or r["stratum"] == st) and (cut == "all" or r["cut"] == cut)]
            if not sel:
                continue
            c = cover(sel, tab)
            cut_s = cut if cut == "all" else f"{cut:.0%}"
            lines.append(
                f"| {st} | {cut_s} | {len(sel)} | "
                + " | ".join(_cell(sel, k) for k in cols)
                + f" | {c['covered']:.0%} ({c['width']:.3f}) | {c['boot_covered']:.0%} ({c['boot_width']:.3f}) |"
            )
    return lines + [""]


def ident_table(rows: list[dict], tab: dict, title: str) -> list[str]:
    fk, point = fit_key(tab["point"]), tab["point"]
    lines = [
        f"### {title}",
        "",
        "| rule | marked | within 0.02 marked | not marked | covered marked | not marked |",
        "|---|---|---|---|---|---|",
    ]
    for rule in RULES:
        m = [r for r in rows if r["ident"][fk][rule]]
        o = [r for r in rows if not r["ident"][fk][rule]]
        cm = cover(m, tab).get("covered") if rule == tab["rule"] else None
        co = cover(o, tab).get("covered") if rule == tab["rule"] else None
        star = " (chosen)" if rule == tab["rule"] else ""
        lines.append(
            f"| {rule}{star} | {len(m)} of {len(rows)} ({len(m) / max(len(rows), 1):.0%}) | "
            f"{_pct(within_rate(m, point))} | {_pct(within_rate(o, point))} | {_pct(cm)} | {_pct(co)} |"
        )
    return lines + [""]


def _pct(v) -> str:
    return "-" if v is None else f"{v:.0%}"


def same(a, b, tol: float = 1e-6) -> bool:
    """Equal JSON values, numbers within `tol` (relative): a remade table against the shipped one."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k], tol) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(u, v, tol) for u, v in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return abs(a - b) <= tol * max(1.0, abs(a), abs(b))
    return a == b


def print_report(a: dict, rows: list[dict], args) -> int:
    tab = a["table"]
    if args.calibrate:
        TABLE.write_text(json.dumps(tab, indent=1) + "\n")
        print(f"wrote {TABLE}", file=sys.stderr)
    if args.check_calibration:
        shipped = json.loads(TABLE.read_text())
        if not same(shipped, json.loads(json.dumps(tab))):
            print(f"{TABLE} differs from what the development half gives now:\n{json.dumps(tab, indent=1)}")
            return 1
        print(f"{TABLE}: reproduced from the development half")
    side = [r for r in rows if args.side == "all" or r["side"] == args.side]
    out = [
        f"## Chosen on the development half: point `{a['point']}`, identification `{a['rule']}`",
        "",
        "dev mean |error| (mean of the two domains): "
        + ", ".join(f"{k} {v:.4f}" for k, v in sorted(a["point_scores"].items(), key=lambda kv: kv[1])),
        "",
        "dev identification: "
        + "; ".join(f"{k}: marks {v['share']:.0%}, gap {v['gap']:+.2f}" for k, v in a["rule_scores"].items()),
        "",
    ]
    for dom in ("real", "committed"):
        sel = [r for r in side if r["domain"] == dom]
        out += strata_table(sel, tab, f"{args.side} half, {dom} runs ({len({r['name'] for r in sel})} curves)")
        out += ident_table(sel, tab, f"{args.side} half, {dom} runs: identified or not")
        rk = ranking(sel, tab)
        out += [
            f"ranking pairs ({dom}, cut 50%): {rk['pairs']} pairs; right: "
            + ", ".join(
                f"{k} {v:.0%}" for k, v in rk.items() if k not in ("pairs", "called", "called_right") and v is not None
            )
            + f"; intervals apart on {rk['called']} pairs, right on {_pct(rk['called_right'])}",
            "",
        ]
    print("\n".join(out))
    return 0
