"""Beyond one machine: multi-node command sets, their consistency, and the cluster preflight.

servepilot does not orchestrate: the engines, Ray, LeaderWorkerSet or Slurm launch. This
package reads the set of per-node commands (or the one Ray-launched command), derives the
topology and checks that the nodes agree; `preflight` compares a probe of every node with it.
"""
