"""A 4-rank gloo job on a 2x2 DeviceMesh named ("dp", "tp") (tests/analyses/test_late.py): all_reduces on
each dimension's group and on the world; the communicators' dimensions must be named."""
import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh


def main():
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    for _ in range(3):
        t = torch.ones(256)
        dist.all_reduce(t, group=mesh.get_group("tp"))
        dist.all_reduce(t, group=mesh.get_group("dp"))
        dist.all_reduce(t)
    dist.barrier()
    # this rank's own record that its work is done (tests check it beside nsyscomm's verdict)
    if os.environ.get("NSYSCOMM_TEST_DONE_DIR"):
        open(os.path.join(os.environ["NSYSCOMM_TEST_DONE_DIR"], f"done.{dist.get_rank()}"), "w").close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
