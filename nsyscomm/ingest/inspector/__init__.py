"""NCCL Inspector's dumps (NCCL's profiler plugin, ``plugins/profiler/inspector``) as a source of
collectives: ``records`` reads and checks one dump's JSON lines, ``folder`` what only the whole
folder of dumps tells (global ranks, communicator members, records one rank lacks), ``reader``
makes one dump's Extract, ``prom`` reads the Prometheus mode's per-bucket metrics."""
