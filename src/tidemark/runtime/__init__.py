"""The job runtime: the processes that run a job, one folder each, and what they share.

* :mod:`tidemark.runtime.job`: what every process of a job shares: the attempt a supervisor hands
  a worker, the physical plan and who owns what, the control plane's client side, record
  headers, metrics, fault points, the health server, the reasons a restart will not fix.
* :mod:`tidemark.runtime.supervisor`: ``tidemark jobs run``: attempts, which state each restores,
  failover, evidence of life, adoption by a restarted supervisor.
* :mod:`tidemark.runtime.placement`: where worker processes run: children of the supervisor or
  of a worker host (``tidemark jobs host``), and the topic between supervisors and hosts.
* :mod:`tidemark.runtime.worker`: one stage worker process (``tidemark jobs worker``, or a warm
  standby): the streaming query, the bootstrap that wires and restores an attempt, the runner
  that drives it, the inputs, tasks, clock, alignment, checkpoints and outputs.
* :mod:`tidemark.runtime.job_commands`: the ``tidemark jobs`` commands that start them.

The job API users write against is :mod:`tidemark.api`; operators are :mod:`tidemark.operators`.
"""
