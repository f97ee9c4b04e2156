"""The page's reading of its own run: each goal of this project's defaults, how far the run
is from it, where a step's time and CPU go beside the floor and Pydantic AI, and, for a goal
missed, what would close it. Written from the run's figures, so a new run explains itself."""

from __future__ import annotations

from bench.common import spread
from bench.scenarios import Config, Results

PROJECT, FLOOR, PAI, PLAIN, REGULAR = "project", "floor", "pydantic-ai", "plain", "project-regular"


def _mid(values: list[float]) -> float:
    return spread(values)[1]


def _ratio(table: dict[str, list[float]], a: str, b: str) -> float:
    pairs = [
        x / y for x, y in zip(table.get(a, []), table.get(b, []), strict=False) if x == x and y == y and y
    ]
    return _mid(pairs)


def _ms(value: float) -> str:
    return "–" if value != value else f"{value:.1f}"


def section(results: Results, cfg: Config, keys: list[str]) -> list[str]:
    """The section, or nothing when the run lacks this project or its comparisons."""
    if PROJECT not in keys or not (results.single or results.many):
        return []
    single, many = results.single, results.many
    L = ["## The goals in this run: the gaps, and where the time goes", ""]
    L += _where(results, keys)
    missed: list[str] = []
    if PAI in keys and single:
        r = _ratio(single.get("overhead_ms", {}), PROJECT, PAI)
        if r == r and r > 0.5:
            pai = _mid(single["overhead_ms"].get(PAI, []))
            missed.append(
                f"- **Per-step overhead {r:.2f} × Pydantic AI's, the goal 0.5.** {_ms((r - 0.5) * pai)} ms of "
                "overhead a step too many on one session; " + _LATENCY
            )
    if single:
        r = _ratio(single.get("median_ms", {}), PROJECT, FLOOR)
        if r == r and r > 1.2:
            floor = _mid(single["median_ms"].get(FLOOR, []))
            missed.append(
                f"- **Per-step time {r:.2f} × the floor's, the goal 1.2.** {_ms((r - 1.2) * floor)} ms a step "
                "too slow on one session; "
                + ("what would close it is what closes the overhead's gap (above)." if missed else _LATENCY)
            )
    if PAI in keys and many:
        r = _ratio(many.get("steps_per_s", {}), PROJECT, PAI)
        if r == r and r < 2.0:
            cpu = _mid(many.get("cpu_ms", {}).get(PROJECT, []))
            missed.append(
                f"- **{cfg.many_sessions}-session throughput {r:.2f} × Pydantic AI's, the goal 2.** With the cores "
                f"the limit, throughput follows the CPU a step costs the worker and the server together: "
                f"{_ms(cpu)} ms here, so about {_ms(cpu * (1 - r / 2))} ms less a step would reach it. "
                + _CPU
            )
        r = _ratio(many.get("cpu_ms", {}), PROJECT, PAI)
        if r == r and r > 0.6:
            pai = _mid(many["cpu_ms"].get(PAI, []))
            missed.append(
                f"- **Worker + server CPU {r:.2f} × Pydantic AI's, the goal 0.6.** {_ms((r - 0.6) * pai)} ms a "
                "step too many. " + _CPU
            )
    if missed:
        L += ["Missed in this run, with the gap and what would close it:", "", *missed, ""]
    else:
        L += ["Every goal of this project's defaults was met in this run (the table at the top).", ""]
    return L


def _where(results: Results, keys: list[str]) -> list[str]:
    """A table of step time and CPU a step, this run's medians, and the project's excess over the floor."""
    single, many = results.single, results.many
    shown = [k for k in (FLOOR, PROJECT, REGULAR, PAI, PLAIN) if k in keys]
    L = ["Medians of this run (one session: step time and CPU a step; "
         f"{'many sessions' if not many else 'many sessions at once'}: CPU a step and steps a second):", "",
         "| contender | one session: step, ms | worker CPU, ms | server CPU, ms | many: worker CPU, ms | "
         "server CPU, ms | steps / s |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for key in shown:
        cells = [_mid(t.get(key, [])) for t in (single.get("median_ms", {}), single.get("worker_cpu_ms", {}),
                                                single.get("server_cpu_ms", {}), many.get("worker_cpu_ms", {}),
                                                many.get("server_cpu_ms", {}), many.get("steps_per_s", {}))]  # fmt: skip
        L.append(f"| {key} | " + " | ".join(_ms(c) for c in cells) + " |")
    L.append("")
    worker = _mid(many.get("worker_cpu_ms", {}).get(PROJECT, [])) - _mid(
        many.get("worker_cpu_ms", {}).get(FLOOR, [])
    )
    server = _mid(many.get("server_cpu_ms", {}).get(PROJECT, [])) - _mid(
        many.get("server_cpu_ms", {}).get(FLOOR, [])
    )
    plain = _mid(single.get("worker_cpu_ms", {}).get(PLAIN, []))
    if worker == worker and server == server:
        L.append(
            f"With {'many sessions at once' if many else 'load'}, this project's step costs the worker {worker:+.1f} ms "
            f"of CPU and the server {server:+.1f} ms against the floor's, whose model activity makes no HTTP request"
            + (f" (the plain loop's whole step, the model's HTTP request through the `anthropic` client and the "
               f"tool, is {_ms(plain)} ms of CPU)" if plain == plain else "")
            + ". `python -m bench.profile` samples this project's worker under the same load and lists "
            "where its time goes."
        )  # fmt: skip
        L.append("")
    return L


_LATENCY = (
    "on one session every millisecond of CPU between two model requests is on the critical path, so "
    "what would close it is what cuts the worker's CPU a step (below) and the round trips through the "
    "server: a step with the defaults is one workflow task and one activity (the model call), the floor's "
    "two of each."
)
_CPU = (
    "What is left above the floor is the model call's HTTP request (the `anthropic` client's request "
    "building, about a twentieth of the worker's busy samples after the lean path, and the HTTP exchange "
    "itself) and the SDK's activity machinery around it (payload conversion, the bridge to the Rust core); "
    "the project's own workflow code is a few percent. Cuts in order of size: send the model call's "
    "request through a bare HTTP connection rather than the SDK's request pipeline; build the session's "
    "current details and search attributes once per workflow task rather than on each change; send the "
    "system prompt and the limits by reference like the tool specs, which shrinks every model call's "
    "payload."
)
