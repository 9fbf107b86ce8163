"""Device, precision and backend switches from the hardware config."""
import contextlib
import os
import random
import re
import socket
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from .errors import UserError


@dataclass
class Hardware:
    device: torch.device
    amp_dtype: torch.dtype | None  # autocast dtype, None for plain fp32
    channels_last: bool
    rank: int = 0
    world_size: int = 1
    precision: str = "fp32"  # what the run computes in, as metrics.json records it: bf16 (autocast), tf32, fp32
    threads: int = 1  # torch's CPU threads
    threads_reason: str = ""  # what chose them, for the log
    hosts: list[str] = field(default_factory=lambda: [socket.gethostname()])  # each rank's machine, by rank


def rank() -> int:
    """This process's rank under torchrun (0 when run alone): only rank 0 writes files or prints."""
    return int(os.environ.get("RANK", "0"))


def setup(cfg, fp32: bool = False) -> Hardware:
    """fp32: plain fp32 arithmetic, no autocast and no TF32 (method.protocol=official), whatever precision=auto
    and tf32=null would choose."""
    if cfg.distributed:
        return _setup_distributed(cfg, fp32)
    return _setup(cfg, fp32=fp32)


# The port a job's tasks meet at: drawn from the job id, so that every task draws the same one, below Linux's
# ephemeral range (32768-60999 by default). submitit's own rule draws from 20000-60000, where a port can be held by
# any outgoing connection on the host: rank 0 then fails with EADDRINUSE and the others wait for it (seen once in
# the suite, beside another test's DDP run).
MASTER_PORTS = (20000, 32767)


def cluster_ranks(distributed: bool) -> None:
    """A job that Slurm (srun) or submitit started as several tasks: with hardware=ddp, torch.distributed's
    environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) from the job's, as
    submitit's TorchDistributedEnvironment derives it; a submitit job of several tasks without it is refused in
    one line (each task would train the same run). Nothing under torchrun, which sets its own, nor for a job of
    one task."""
    if "WORLD_SIZE" in os.environ:
        return
    job = _job_environment()
    if job is None or job.num_tasks == 1:
        return
    if not distributed:
        if "SUBMITIT_EXECUTOR" not in os.environ:  # a batch script's own step carries SLURM_NTASKS too: one process
            return
        raise UserError(several_tasks_refusal(job.num_tasks))
    os.environ.update({
        "RANK": str(job.global_rank), "WORLD_SIZE": str(job.num_tasks), "LOCAL_RANK": str(job.local_rank),
        "LOCAL_WORLD_SIZE": str(job.num_tasks // job.num_nodes), "MASTER_ADDR": job.hostnames[0],
        "MASTER_PORT": os.environ.get("MASTER_PORT") or str(random.Random(job.job_id).randint(*MASTER_PORTS))})


def several_tasks_refusal(tasks: int) -> str:
    return (f"this job runs as {tasks} tasks (hydra.launcher.tasks_per_node x nodes, or srun's --ntasks): use "
            "hardware=ddp to train one run on them, or a single task per job")


def _job_environment():
    """submitit's view of the job this process is a task of: the job submitit started (on Slurm or locally), or
    one that srun started itself; None outside both."""
    if "SUBMITIT_EXECUTOR" in os.environ:
        import submitit
        return submitit.JobEnvironment()
    if "SLURM_PROCID" in os.environ and "SLURM_NTASKS" in os.environ:
        from submitit.slurm.slurm import SlurmJobEnvironment
        return SlurmJobEnvironment()
    return None


def _setup_distributed(cfg, fp32: bool = False) -> Hardware:
    """One process per device under torchrun: NCCL between GPUs, gloo between CPU processes."""
    import torch.distributed as dist
    if "WORLD_SIZE" not in os.environ:
        raise UserError("hardware=ddp runs under torchrun (torchrun --nproc_per_node=N -m cl_bench train "
                        "hardware=ddp ...) or as a Slurm / submitit job of several tasks "
                        "(hydra.launcher.tasks_per_node=N)")
    on_gpu = torch.cuda.is_available() and cfg.device in ("auto", "cuda")
    if on_gpu:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized():
        dist.init_process_group("nccl" if on_gpu else "gloo")
    hw = _setup(cfg, torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu"), fp32)
    hw.rank, hw.world_size = dist.get_rank(), dist.get_world_size()
    hw.hosts = [None] * hw.world_size
    dist.all_gather_object(hw.hosts, socket.gethostname())  # once, before training: no sync in the loop
    return hw


def ran_on(hw: Hardware) -> dict:
    """Where the run ran, as metrics.json records it (`ran_on`), so that a report tells a 1-GPU row from a
    2-node one: what started it, its data-parallel world, each rank's host, its device and CPU threads."""
    return {"launcher": launcher(), "world_size": hw.world_size, "hosts": hw.hosts, "nodes": len(set(hw.hosts)),
            "device": hw.device.type, "threads": hw.threads}


def graph_mode(requested: bool, method, hw: Hardware) -> tuple[bool, str]:
    """hardware.cuda_graphs for a run of method (its class): whether fit()'s steps go through a StepGraph
    (methods/loop.py), and what metrics.json's ran_on.cuda_graphs says: captured, off, or why they were not
    captured. Without a CUDA device the StepGraph runs its steps eagerly, as the tests run it."""
    if not requested:
        return False, "off"
    traits = method.traits
    if not traits.captures():
        return False, f"not captured: {method.name}'s steps are not capture-safe ({traits.graph_safe})"
    if hw.world_size > 1:
        return False, "not captured: data-parallel steps are not captured"
    if hw.device.type != "cuda":
        return True, "not captured: no CUDA device (the steps ran eagerly through the graph's buffers)"
    if traits.graph_safe is not True:
        return True, (f"captured in its {', '.join(traits.graph_phases)} phases only (the others' steps are not "
                      f"capture-safe: {traits.graph_safe})")
    return True, "captured"


def launcher() -> str:
    """What started this process: torchrun, submitit (on Slurm or locally), Slurm's srun, a Hydra multirun's
    launcher (joblib, basic), or the command alone ("cl-bench")."""
    if "TORCHELASTIC_RUN_ID" in os.environ:
        return "torchrun"
    if "SUBMITIT_EXECUTOR" in os.environ:
        return f"submitit_{os.environ['SUBMITIT_EXECUTOR']}"
    if "SLURM_JOB_ID" in os.environ:
        return "slurm"
    multirun = multirun_launcher()
    if multirun is not None:
        target = multirun.get("_target_", "")  # e.g. ...joblib_launcher.JoblibLauncher
        return target.rsplit(".", 1)[-1].removesuffix("Launcher").lower() or "hydra"
    return "cl-bench"


_multirun_launcher = None  # set by app.task, the one module that asks Hydra
_multirun_job = 0  # the job's number in its multirun (Hydra's job.num)


def enter_multirun(launcher, job: int = 0) -> None:
    """Note the launcher's config of the Hydra multirun this job belongs to (None: not in one) and its number."""
    global _multirun_launcher, _multirun_job
    _multirun_launcher, _multirun_job = launcher, job


def multirun_launcher():
    """The launcher's config of the Hydra multirun this job belongs to, or None outside one."""
    return _multirun_launcher


def multirun_job() -> int:
    """This job's number in its multirun (0 outside one)."""
    return _multirun_job


def _device(cfg) -> torch.device:
    if cfg.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(cfg.device)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise UserError(f"hardware.device={cfg.device} but no CUDA GPU is visible: use hardware=cpu or "
                            "hardware=auto")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", placed_gpu(torch.cuda.device_count()))
        torch.cuda.set_device(device)  # what the run allocates without naming a device goes there too
    return device


def placed_gpu(gpus: int) -> int:
    """The GPU a job takes when its device names none (hardware.device=cuda): in a multirun whose launcher runs jobs
    side by side (the parallel launcher's n_jobs), job n takes GPU n mod gpus, so that a sweep spreads over a
    node's GPUs; every other run, and every job on a one-GPU machine, takes GPU 0 (torchrun's ranks are placed by
    LOCAL_RANK, not here). hardware.device=cuda:N places a run by hand."""
    launcher = multirun_launcher()
    side_by_side = launcher is not None and launcher.get("n_jobs") is not None
    return multirun_job() % gpus if side_by_side and gpus > 1 else 0


def _setup(cfg, device: torch.device | None = None, fp32: bool = False) -> Hardware:
    device = device or _device(cfg)
    threads, reason = (cfg.threads, "hardware.threads") if cfg.threads is not None else default_threads()
    if threads is None:
        threads = torch.get_num_threads()
    else:
        torch.set_num_threads(threads)
    on_gpu = device.type == "cuda"
    bf16 = not fp32 and (cfg.precision == "bf16" or (cfg.precision == "auto" and on_gpu))
    tf32 = not fp32 and (cfg.tf32 is None or cfg.tf32)
    channels_last = on_gpu if cfg.channels_last is None else cfg.channels_last
    if on_gpu:
        torch.cuda.reset_peak_memory_stats(device)  # this run's peak, when a multirun runs jobs in one process
        # Set both ways, every run: a multirun's earlier job in this process must not leave TF32 on.
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cudnn.benchmark = not cfg.deterministic
    if cfg.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    # warn_only: an op with no deterministic kernel (on CUDA, AdaptiveAvgPool2d's backward in resnet, vgg and
    # convnet, kthvalue in cpg) warns instead of stopping the run; watch_nondeterminism records which ran. Set both
    # ways, every run, as TF32 above: a multirun's earlier job in this process must not leave it on.
    torch.use_deterministic_algorithms(cfg.deterministic, warn_only=True)
    # TF32 touches only what runs in fp32 on a GPU; the CPU computes in fp32 (bf16 autocast aside)
    precision = "bf16" if bf16 else "tf32" if tf32 and on_gpu else "fp32"
    return Hardware(device, torch.bfloat16 if bf16 else None, channels_last, precision=precision,
                    threads=threads, threads_reason=reason)


# What torch warns (UserWarning) when an op without a deterministic implementation runs under
# use_deterministic_algorithms(True, warn_only=True), from at::Context::alertNotDeterministic: "<op> does not have a
# deterministic implementation, but you set 'torch.use_deterministic_algorithms(True, warn_only=True)'. ..."
NONDETERMINISTIC = re.compile(r"(.+?) does not have a deterministic implementation")


def nondeterministic_op(message) -> str | None:
    """The op a torch warning names as having no deterministic implementation, or None for any other warning."""
    found = NONDETERMINISTIC.match(str(message))
    return found.group(1) if found else None


@contextlib.contextmanager
def watch_nondeterminism(report: Callable[[str], None]) -> Iterator[list[str]]:
    """Within it, torch's warnings that an op ran without a deterministic implementation (hardware.deterministic
    on a device that lacks one) are collected: yields the list of those ops, in the order they first ran, and
    reports each op once (a warning line of the run: console, train.log, events.jsonl) in place of torch's own
    warning, which would otherwise repeat at every step. Every other warning is shown as before."""
    ops: list[str] = []
    with warnings.catch_warnings():
        show = warnings.showwarning

        def showwarning(message, category, filename, lineno, file=None, line=None):
            op = nondeterministic_op(message)
            if op is None:
                return show(message, category, filename, lineno, file, line)
            if op not in ops:
                ops.append(op)
                report(f"hardware.deterministic: {op} has no deterministic implementation here and ran anyway, so "
                       f"this run may not repeat bit for bit (metrics.json ran_on.nondeterministic_ops)")

        warnings.showwarning = showwarning
        # "always": every occurrence reaches showwarning, whatever filters the user set ("ignore" would hide the op
        # from the record, "error" stop the run)
        warnings.filterwarnings("always", message=NONDETERMINISTIC.pattern, category=UserWarning)
        yield ops


def default_threads() -> tuple[int | None, str]:
    """Torch's CPU threads for a run that names none (hardware.threads=null), and why: the cores this process may
    use, shared evenly by the jobs started beside it on this machine; None for a run alone, which keeps torch's
    own default (one per core, or OMP_NUM_THREADS). Threads beyond the cores do not add up: jobs side by side
    that each took every core ran small-batch online training 2.9x slower here (`python scripts/bench.py
    threads`, docs/benchmarks.md "Jobs side by side")."""
    available = cores()
    jobs, source = concurrent_jobs(available)
    if jobs == 1:
        return None, f"torch's default for a run alone: {source}"
    return max(1, available // jobs), f"{available} cores shared by {jobs} jobs side by side: {source}"


def cores() -> int:
    """The cores this process may run on, not the machine's (os.cpu_count): under a container's or a scheduler's
    CPU limit, one thread or process per host core would only contend."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def concurrent_jobs(cores: int) -> tuple[int, str]:
    """How many cl-bench jobs this machine runs at once beside this one (itself included), and what says so:
    torchrun's processes on this node, Hydra's joblib launcher's n_jobs in a multirun, or a submitit job's
    cpus_per_task (its share of the cores, returned as the number of such shares)."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if local > 1:
        return local, f"LOCAL_WORLD_SIZE={local}: the data-parallel processes on this node"
    launcher = multirun_launcher()
    if launcher is None:
        return 1, "a single run"
    n_jobs = launcher.get("n_jobs")
    if n_jobs is not None:
        return joblib_jobs(n_jobs, cores), f"hydra.launcher.n_jobs={n_jobs}"
    cpus = launcher.get("cpus_per_task")  # submitit's: the job's own cores
    if cpus:
        return max(1, cores // cpus), f"hydra.launcher.cpus_per_task={cpus}"
    return 1, "the launcher runs its jobs one after another"


def joblib_jobs(n_jobs: int, cores: int) -> int:
    """The workers joblib runs for n_jobs: n_jobs itself when positive, -1 one per core, -2 all cores but one, ..."""
    return n_jobs if n_jobs > 0 else max(1, cores + 1 + n_jobs)


def peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def rng_state(generator: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    state = {"torch": torch.get_rng_state(), "data": generator.get_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict, generator: torch.Generator, device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    generator.set_state(state["data"])
    if "cuda" in state and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], device)
