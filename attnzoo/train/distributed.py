"""One setup for a run on several processes, and the few collective calls the trainer and the tasks make.

    where = setup("auto")   # under torchrun: RANK, WORLD_SIZE, LOCAL_RANK from its environment
    where.rank, where.world_size, where.local_rank, where.device, where.backend

The device: ``auto`` is ``cuda:LOCAL_RANK`` where CUDA is there, else the CPU; ``cuda`` is
``cuda:LOCAL_RANK`` too (each process on its own GPU: torchrun starts one process a GPU, numbered by
LOCAL_RANK on each machine); ``cuda:N`` and ``cpu`` are taken as given. The backend follows the device:
NCCL for CUDA tensors, gloo for the CPU's. The process group is initialised when the world size is over 1
(torchrun's ``MASTER_ADDR`` / ``MASTER_PORT`` say where the ranks meet); :func:`process_group` destroys
the group it made when the run ends, on an error too (one a caller made before stays theirs). Before it
waits for its peers a process started by hand (not by torchrun) says on stderr which ranks it waits for
and at which address, and every process stops after ``ATTNZOO_DIST_TIMEOUT`` seconds (default 300, not
torch's 30 minutes) with a ``ConfigError`` saying
the same: a ``RANK`` / ``WORLD_SIZE`` set by hand with no peer started ends in minutes, not in silence.

Without a process group (one process) every collective here is the identity, so a task's evaluation and
the trainer's bookkeeping call them unconditionally.
"""

from __future__ import annotations

import datetime
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from attnzoo.errors import ConfigError

__all__ = ["Setup", "setup", "process_group", "active", "all_sum", "all_gather_objects", "barrier"]


@dataclass(frozen=True)
class Setup:
    """Where this process trains: its rank among ``world_size`` processes, its rank on its own machine
    (``local_rank``), its device, the process group's backend (``nccl`` or ``gloo``), and whether this
    setup made the group (``made_group``: it is then this run's to destroy)."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str
    made_group: bool = False


def _environment_int(name: str, default: int, lowest: int) -> int:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    try:
        number = int(value.strip())
    except ValueError:
        number = lowest - 1
    if number < lowest:
        raise ConfigError(
            f"the environment variable {name}={value!r} is not a whole number >= {lowest}; torchrun sets it "
            f"(torchrun --nproc_per_node N -m attnzoo train ...): unset it, or set it to a number"
        )
    return number


def _device(setting: str | None, local_rank: int) -> torch.device:
    """The device a setting names, with this process's GPU for ``auto`` and ``cuda``; a device that is not
    there is a ConfigError, not torch's error at the first tensor placed on it."""
    setting = "auto" if setting is None else str(setting).strip()
    cuda = torch.cuda.is_available()
    if setting == "auto":
        setting = "cuda" if cuda else "cpu"
    try:
        device = torch.device(setting)
    except RuntimeError:
        raise ConfigError(f"train.device must be auto, cpu, cuda or cuda:N, got {setting!r}") from None
    if device.type == "cpu":
        return torch.device("cpu")
    if device.type != "cuda":
        raise ConfigError(f"train.device must be auto, cpu, cuda or cuda:N, got {setting!r}")
    if not cuda:
        raise ConfigError(
            f"train.device is {setting!r}, but torch sees no CUDA device here (torch.cuda.is_available() is "
            f"False); train with train.device=cpu (or auto), or on a machine with a GPU and a CUDA build of torch"
        )
    count = torch.cuda.device_count()
    index = local_rank if device.index is None else device.index
    if index >= count:
        what = f"LOCAL_RANK={local_rank}" if device.index is None else f"train.device={setting!r}"
        raise ConfigError(
            f"{what} names GPU {index}, but this machine shows {count} (cuda:0 to cuda:{count - 1}); start at "
            f"most {count} processes a machine (torchrun --nproc_per_node {count}), or check CUDA_VISIBLE_DEVICES"
        )
    return torch.device("cuda", index)


def setup(device: str | None = "auto", *, batch_size: int | None = None) -> Setup:
    """This process's place in the run, from torchrun's ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` (one
    process: 0, 1, 0); on CUDA it makes this process's GPU the current one, and over one process it
    initialises the process group (NCCL on CUDA, gloo on the CPU) unless one is already there.

    ``device``: ``train.device`` (auto, cpu, cuda, cuda:N). ``batch_size``: checked to divide by the world
    size, before any process group is made."""
    world = _environment_int("WORLD_SIZE", 1, 1)
    rank = _environment_int("RANK", 0, 0)
    local_rank = _environment_int("LOCAL_RANK", 0, 0)
    if rank >= world:
        raise ConfigError(f"RANK={rank} is not below WORLD_SIZE={world}; torchrun sets both, leave them to it")
    if batch_size is not None and batch_size % world:
        raise ConfigError(
            f"train.batch_size {batch_size} must divide by the number of processes {world} (WORLD_SIZE): "
            f"every process takes an equal part of each batch"
        )
    where = _device(device, local_rank)
    backend = "nccl" if where.type == "cuda" else "gloo"
    if where.type == "cuda":
        torch.cuda.set_device(where)
    made = _needs_group(world) and not torch.distributed.is_initialized()
    if made:
        _join(backend, rank, world)
    return Setup(rank, world, local_rank, where, backend, made)


def _needs_group(world: int) -> bool:
    """Whether a run of ``world`` processes needs a process group: one process needs none."""
    return world > 1


@contextmanager
def process_group(device: str | None = "auto", *, batch_size: int | None = None) -> Iterator[Setup]:
    """:func:`setup` for the length of a run: the process group it made (if any) is destroyed when the
    block ends, by an error too, so that a second run in the same process starts from none and nothing
    holds the rendezvous' sockets after training."""
    where = setup(device, batch_size=batch_size)
    ours = where.made_group
    try:
        yield where
    except BaseException:
        if ours and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
        raise
    if ours and torch.distributed.is_initialized():
        # every rank past its last collective first: a rank that tears its sockets down while another still
        # reads the last bytes of one makes gloo abort that rank ("terminate called without an active exception")
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


ENV_TIMEOUT = "ATTNZOO_DIST_TIMEOUT"
DEFAULT_TIMEOUT = 300  # seconds a process waits for its peers (torch's own default is 30 minutes)


def _join(backend: str, rank: int, world: int) -> None:
    """Initialise the process group, saying first whom this process waits for and where, and stopping
    after ``ATTNZOO_DIST_TIMEOUT`` seconds with a ``ConfigError`` that says it again."""
    seconds = _environment_int(ENV_TIMEOUT, DEFAULT_TIMEOUT, 1)
    address, port = os.environ.get("MASTER_ADDR", ""), os.environ.get("MASTER_PORT", "")
    others = [r for r in range(world) if r != rank]
    peers = f"rank{'s' if len(others) > 1 else ''} {_ranks(others)}" if others else "the group's own store"
    where = f"{address}:{port}" if address and port else "no address (MASTER_ADDR and MASTER_PORT are not both set)"
    waits = f"rank {rank} of {world} waits up to {seconds} s ({ENV_TIMEOUT}) for {peers} at {where}"
    if not os.environ.get("TORCHELASTIC_RUN_ID"):  # by hand; torchrun starts every rank at once, says its own
        print(f"attnzoo: {waits} (MASTER_ADDR:MASTER_PORT)", file=sys.stderr, flush=True)
    try:
        torch.distributed.init_process_group(backend, timeout=datetime.timedelta(seconds=seconds))
    except (RuntimeError, ValueError) as e:  # torch's DistStoreError / DistNetworkError are RuntimeErrors
        reason = " ".join(str(e).split())[:200]
        raise ConfigError(
            f"{waits}, and they did not all join ({reason}); start every rank (torchrun --nproc_per_node "
            f"{world} sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT for each), raise {ENV_TIMEOUT} if they "
            f"start slowly, or unset WORLD_SIZE and RANK to train in one process"
        ) from None


def _ranks(ranks: list[int]) -> str:
    """``1``, ``1 and 2`` or ``1 to 7``."""
    if len(ranks) == 1:
        return str(ranks[0])
    if ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 2:
        return f"{ranks[0]} to {ranks[-1]}"
    return ", ".join(map(str, ranks[:-1])) + f" and {ranks[-1]}"


def active() -> bool:
    """Whether a process group of more than one process is running."""
    return torch.distributed.is_available() and torch.distributed.is_initialized() and _world() > 1


def _world() -> int:
    return torch.distributed.get_world_size()


def _collective_device() -> torch.device:
    """Where a tensor must be for the group's backend: NCCL reduces CUDA tensors only."""
    if torch.distributed.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_sum(tensor: torch.Tensor) -> torch.Tensor:
    """The sum of ``tensor`` over every process (``tensor`` itself with one process), on the CPU. Counts
    are summed in the tensor's own dtype: give float64 for sums that must not round."""
    if not active():
        return tensor
    moved = tensor.detach().to(_collective_device()).clone()
    torch.distributed.all_reduce(moved, op=torch.distributed.ReduceOp.SUM)
    return moved.cpu()


def all_gather_objects(value: Any) -> list[Any]:
    """Every process's ``value`` (picklable), by rank; ``[value]`` with one process."""
    if not active():
        return [value]
    out: list[Any] = [None] * _world()
    torch.distributed.all_gather_object(out, value)
    return out


def barrier() -> None:
    if active():
        torch.distributed.barrier()
