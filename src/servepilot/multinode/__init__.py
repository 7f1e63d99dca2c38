"""Beyond one machine: multi-node command sets, their consistency, and the cluster preflight.

servepilot does not orchestrate: the engines, Ray, LeaderWorkerSet or Slurm launch. This
package reads the set of per-node commands (or the one Ray-launched command), derives the
topology and checks that the nodes agree; `preflight` compares a probe of every node with it.
"""

from collections.abc import Sequence


def is_multinode(command_files: Sequence[str], nodes: int | None, ray_address: str | None) -> bool:
    """Whether a verb's options describe several nodes (or a Ray launch). Here rather than in
    analysis.py so that a single-node `check` or `plan` does not import the multi-node layer."""
    return len(command_files) > 1 or bool(nodes and nodes > 1) or bool(ray_address)
