"""A 2-rank gloo job: the ring of "Writing Distributed Applications" (PyTorch tutorials), each
rank isends its buffer to the next rank and irecvs from the previous one, then waits for both;
ROUNDS rounds. Rank LATE_RANK sleeps LATE_S (timed) before round LATE_ROUND. The program writes
to $RING_JOB_OUT/rank<r>.json each round's time, the sleep, and a synchronous send/recv of the
same size (REPS, timed on the receiver). The user code has no nsyscomm in it.
"""

import json
import os
import time

import torch
import torch.distributed as dist

N = 1 << 18  # float32 elements: 1 MiB
ROUNDS = 6
LATE_RANK = 1
LATE_ROUND = 3
LATE_S = 0.3
REPS = 5


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    size = dist.get_world_size()
    send, recv = torch.full((N,), float(rank)), torch.zeros(N)
    out = {"rank": rank, "late_rank": LATE_RANK, "late_round": LATE_ROUND, "bytes": 4 * N, "round_ns": []}
    dist.barrier()
    for r in range(ROUNDS):
        t0 = time.perf_counter_ns()
        if rank == LATE_RANK and r == LATE_ROUND:
            time.sleep(LATE_S)
            out["sleep_ns"] = time.perf_counter_ns() - t0
        reqs = [dist.isend(send, (rank + 1) % size), dist.irecv(recv, (rank - 1) % size)]
        for q in reqs:
            q.wait()
        out["round_ns"].append(time.perf_counter_ns() - t0)
    dist.barrier()
    times = []
    for _ in range(REPS + 1):
        dist.barrier()
        t0 = time.perf_counter_ns()
        if rank == 0:
            dist.send(send, 1)
        else:
            dist.recv(recv, 0)
        times.append(time.perf_counter_ns() - t0)
    out["sync_ns"] = times[1:]
    path = os.environ.get("RING_JOB_OUT")
    if path:
        with open(os.path.join(path, f"rank{rank}.json"), "w") as f:
            json.dump(out, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
