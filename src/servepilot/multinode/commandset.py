"""A multi-node command set: one engine command per node (in node order), or the single
command that Ray spreads over N nodes.

    cs = load_command_set(command_files=["node0.sh", "node1.sh"], engine_version="0.13.0")
    cs.shape       # "vllm-mp"
    cs.nodes[1].args.node_rank  # 1

Launch shapes (reference: servepilot's multi-node research notes, sources per row):
- "ray": vLLM with --distributed-executor-backend ray (or --data-parallel-backend ray), one
  command on the head (docs.vllm.ai serving/parallelism_scaling.md);
- "vllm-mp": vLLM native multi-node, --nnodes/--node-rank/--master-addr, --headless on
  the other nodes (vllm PR #23691);
- "vllm-dp": vLLM multi-node data parallel, --data-parallel-size-local/-start-rank/-address,
  --headless or --data-parallel-hybrid-lb (vllm docs/serving/data_parallel_deployment.md,
  PR #15977);
- "sglang": every node runs the server with --nnodes/--node-rank/--dist-init-addr
  (docs.sglang.io references/multi_node_deployment);
- "replicas": several commands that set no multi-node flag: independent servers.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from servepilot.engines.command import EngineLaunch
from servepilot.errors import BadInput, CommandLineError

# LeaderWorkerSet puts these in each pod's environment; Kubernetes expands `$(NAME)` in a
# container's args (docs.vllm.ai deployment/frameworks/lws).
LWS_VARIABLE = re.compile(r"\$\((LWS_[A-Z_]+)\)")
LWS_LEADER_PLACEHOLDER = "lws-leader-address"


@dataclass(frozen=True)
class NodeArgs:
    """The multi-node options of one node's command, normalized across engines."""

    tp: int
    pp: int
    dp: int
    dp_local: int | None = None  # vLLM --data-parallel-size-local
    dp_start: int | None = None  # vLLM --data-parallel-start-rank
    dp_rank: int | None = None  # vLLM --data-parallel-rank: one DP rank per server (external LB)
    ep: int | None = None  # SGLang --ep-size (vLLM derives EP = TP x DP)
    expert_parallel: bool = False
    dp_attention: bool = False  # SGLang --enable-dp-attention
    nnodes: int | None = None
    node_rank: int | None = None
    headless: bool = False
    hybrid_lb: bool = False
    executor: str | None = None  # vLLM --distributed-executor-backend
    dp_backend: str | None = None  # vLLM --data-parallel-backend
    # rendezvous flags as typed (flag -> value), e.g. {"--master-addr": "10.0.0.1"}
    rendezvous: dict = field(default_factory=dict)

    @property
    def uses_ray(self) -> bool:
        return self.executor == "ray" or self.dp_backend == "ray"


@dataclass(frozen=True)
class NodeCommand:
    index: int  # position in the set: node order as given
    origin: str  # the command file, or "command" for the one after `--`
    launch: EngineLaunch
    args: NodeArgs
    text: str = ""  # the node's shell text as read (LeaderWorkerSet variables expanded)
    # flags typed here that the given engine release does not have (other releases do)
    too_new: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"node{self.index}"


@dataclass(frozen=True)
class CommandSet:
    engine: str
    shape: str  # see the module docstring
    nodes: tuple[NodeCommand, ...]  # one per node; for "ray" the one command
    node_count: int
    ray_address: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def head(self) -> NodeCommand:
        return self.nodes[0]


# Option dest names per engine: (tp, pp, dp, ep) and the multi-node flags.
_DESTS = {
    "vllm": {"tp": "tensor_parallel_size", "pp": "pipeline_parallel_size", "dp": "data_parallel_size"},
    "sglang": {"tp": "tp_size", "pp": "pp_size", "dp": "dp_size", "ep": "ep_size"},
}
# The rendezvous flags every node must agree on, by dest, with the flag users type.
RENDEZVOUS = {
    "vllm": {"master_addr": "--master-addr", "master_port": "--master-port",
             "data_parallel_address": "--data-parallel-address",
             "data_parallel_rpc_port": "--data-parallel-rpc-port"},
    "sglang": {"dist_init_addr": "--dist-init-addr"},
}


def load_command_set(
    command: Sequence[str] | str | None = None,
    command_files: Sequence[str] = (),
    *,
    nodes: int | None = None,
    ray_address: str | None = None,
    engine_version: str | None = None,
) -> CommandSet:
    """Parse the per-node commands (or the one Ray command) into a CommandSet.

    BadInput (naming the file) for a script that holds no engine command, for a set that
    mixes servepilot's ways of giving it, or for a single non-Ray command with --nodes.
    """
    given = command is not None and (isinstance(command, str) or bool(list(command)))
    if given and command_files:
        raise CommandLineError("give the per-node commands with --command-file, or one command after `--`, not both")
    if nodes is not None and nodes < 1:
        raise BadInput(f"--nodes {nodes}: a deployment has at least one node")
    texts: list[tuple[str, str]] = []  # (origin, shell text)
    if command_files:
        from servepilot.engines.shell import read_command_file

        texts = [(path, read_command_file(path)) for path in command_files]
    elif given:
        from servepilot.engines.shell import command_text

        texts = [("command", command_text(command))]
    else:
        raise CommandLineError("no command: give one --command-file per node, or the Ray command after `--`")

    notes: list[str] = []
    if len(texts) == 1 and nodes and nodes > 1 and LWS_VARIABLE.search(texts[0][1]):
        # One LeaderWorkerSet template: the same args on every pod, its own index on each.
        origin, text = texts[0]
        texts = [(f"{origin} (LWS pod {k})", text) for k in range(nodes)]
        notes.append(f"one LeaderWorkerSet template expanded for {nodes} pods")
    count = len(texts)
    parsed = [_parse(origin, _expand_lws(text, k, count if nodes is None else max(nodes, count), notes),
                     k, engine_version) for k, (origin, text) in enumerate(texts)]
    engines = {p.launch.engine for p in parsed}
    engine = parsed[0].launch.engine
    if len(parsed) == 1:
        head = parsed[0]
        if not head.args.uses_ray:
            if nodes and nodes > 1 or ray_address:
                raise BadInput(
                    "one command for several nodes is only read for Ray launches "
                    "(--distributed-executor-backend ray or --data-parallel-backend ray)",
                    hint="give each node's command with its own --command-file, in node order",
                )
            return CommandSet(engine, "single", tuple(parsed), 1, notes=tuple(notes))
        if nodes is None and ray_address is None:
            raise BadInput("a Ray launch spans the nodes of a Ray cluster: give --nodes N or --ray-address",
                           hint="the node count is not in the command")
        return CommandSet(engine, "ray", tuple(parsed), nodes or 0, ray_address=ray_address, notes=tuple(notes))
    if nodes is not None and nodes != count:
        notes.append(f"--nodes {nodes} given with {count} command files: the files count")
    shape = _shape(engine, parsed) if len(engines) == 1 else "mixed"
    return CommandSet(engine, shape, tuple(parsed), count, ray_address=ray_address, notes=tuple(notes))


def _expand_lws(text: str, index: int, size: int, notes: list[str]) -> str:
    values = {"LWS_GROUP_SIZE": str(size), "LWS_WORKER_INDEX": str(index),
              "LWS_LEADER_ADDRESS": LWS_LEADER_PLACEHOLDER}

    def sub(m: re.Match) -> str:
        name = m.group(1)
        if name not in values:
            raise CommandLineError(f"$({name}) is not a LeaderWorkerSet variable servepilot knows",
                                   hint="known: " + ", ".join(sorted(values)))
        return values[name]

    out = LWS_VARIABLE.sub(sub, text)
    if out != text:
        note = (f"LeaderWorkerSet variables expanded: LWS_GROUP_SIZE={size}, LWS_WORKER_INDEX=node index, "
                f"LWS_LEADER_ADDRESS={LWS_LEADER_PLACEHOLDER!r}")
        if note not in notes:
            notes.append(note)
    return out


def _parse(origin: str, text: str, index: int, engine_version: str | None) -> NodeCommand:
    from servepilot.engines.cmdline import is_engine_command, parse_argv
    from servepilot.engines.shell import split_shell_line

    try:
        split = split_shell_line(text, is_engine_command)
        launch = parse_argv(split.argv, split.context, engine_version=engine_version)
    except CommandLineError as exc:
        where = origin if origin != "command" else None
        raise CommandLineError(exc.problem, path=exc.path or where, hint=exc.hint) from None
    launch = replace(launch, notes=tuple(split.notes) + launch.notes)
    args_launch, too_new = launch, ()
    if engine_version and launch.unknown_flags:
        # The multi-node shape comes from what was typed: read it with every release's flags,
        # and keep apart the flags this release lacks (a finding says since when they exist).
        args_launch = parse_argv(split.argv, split.context, engine_version=None)
        too_new = tuple(f for f in launch.unknown_flags if f.split("=")[0] not in args_launch.unknown_flags)
    return NodeCommand(index, origin, launch, node_args(args_launch, origin), text, too_new)


def node_args(launch: EngineLaunch, origin: str = "command") -> NodeArgs:
    """The normalized multi-node options of one command (CommandLineError for `-tp x`)."""
    engine = launch.engine
    dests = _DESTS.get(engine)
    if dests is None:
        raise CommandLineError(f"{engine} has no multi-node launch servepilot knows", path=_where(origin))
    o = launch.options

    def whole(dest: str, default: int | None = 1) -> int | None:
        value = o.get(dest)
        if value is None:
            return default
        try:
            return int(value)
        except (TypeError, ValueError):
            raise CommandLineError(f"{dest} = {value!r} is not a whole number", path=_where(origin)) from None

    rendezvous = {flag: str(o[dest]) for dest, flag in RENDEZVOUS[engine].items() if o.get(dest) not in (None, "")}
    if engine == "vllm":
        return NodeArgs(
            tp=whole(dests["tp"]), pp=whole(dests["pp"]), dp=whole(dests["dp"]),
            dp_local=whole("data_parallel_size_local", None), dp_start=whole("data_parallel_start_rank", None),
            dp_rank=whole("data_parallel_rank", None),
            expert_parallel=bool(o.get("enable_expert_parallel")),
            nnodes=whole("nnodes", None), node_rank=whole("node_rank", None),
            headless=bool(o.get("headless")), hybrid_lb=bool(o.get("data_parallel_hybrid_lb")),
            executor=o.get("distributed_executor_backend"), dp_backend=o.get("data_parallel_backend"),
            rendezvous=rendezvous,
        )
    return NodeArgs(
        tp=whole(dests["tp"]), pp=whole(dests["pp"]), dp=whole(dests["dp"]), ep=whole(dests["ep"], None),
        expert_parallel=(whole(dests["ep"], 1) or 1) > 1, dp_attention=bool(o.get("enable_dp_attention")),
        nnodes=whole("nnodes", None), node_rank=whole("node_rank", None), rendezvous=rendezvous,
    )


def _where(origin: str) -> str | None:
    return None if origin == "command" else origin


def _shape(engine: str, nodes: list[NodeCommand]) -> str:
    if engine == "sglang":
        return "sglang"
    args = [n.args for n in nodes]
    if any((a.nnodes or 1) > 1 or a.node_rank is not None for a in args):
        return "vllm-mp"
    if any(a.dp_local is not None or a.dp_start is not None or a.dp_rank is not None or a.headless or a.hybrid_lb
           for a in args):
        return "vllm-dp"
    if any(a.uses_ray for a in args):
        return "ray"
    return "replicas"
