"""A 4-rank gloo job that leaves PyTorch Flight Recorder dumps (tests/analyses/test_hang.py).

torch 2.13 records gloo collectives when TORCH_FR_BUFFER_SIZE is set, but writes no dump by
itself on a gloo timeout (that is the NCCL watchdog's): each rank writes its own with
torch._C._distributed_c10d._dump_fr_trace to <TORCH_FR_DUMP_TEMP_FILE><rank>, the file name
and format torch's dumps have. Rank 1 stops before its 4th all_reduce (and dumps there, as a
stuck rank's dump on a signal would show); the others time out in it (8 s) and dump then.
"""
import datetime
import os
import time

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _dump_fr_trace

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=8))
rank = dist.get_rank()


def dump():
    with open(f"{os.environ['TORCH_FR_DUMP_TEMP_FILE']}{rank}", "wb") as f:
        f.write(_dump_fr_trace(True, True, False))   # (include collectives, include stack traces, only active)


try:
    for i in range(5):
        if rank == 1 and i == 3:
            dump()
            time.sleep(15)
            break
        dist.all_reduce(torch.ones(8))
except RuntimeError:   # gloo's timeout
    dump()
