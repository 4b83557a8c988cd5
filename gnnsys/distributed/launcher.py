"""Start one trainer per device as Ray actors, join them in a torch.distributed group,
run a worker function in each, and recover from a worker death by restarting from the
last checkpoint.

    def work(ctx: WorkerContext, config) -> dict: ...
    results = launch(work, config)      # list of per-rank return values, rank order

With `cluster.workers == 1` the function runs in this process (no Ray), and with
`cluster.launcher: threads` so do K ranks, as threads (`local.ThreadGroup`). A worker that
dies is detected by Ray at once (its actor reference fails); the surviving workers are
killed rather than left waiting in a collective, and the run is retried from its
checkpoint up to `cluster.max_failures` times. A peer that hangs is bounded by the
process-group timeout (`cluster.timeout_s`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import logging
import os
import shutil
import signal
import socket
import stat
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch

from common.files import pid_alive

from .. import allocator
from ..errors import ConfigError, WorkerFailure
from .comm import Communicator
from .local import ThreadGroup

log = logging.getLogger(__name__)
LAUNCHERS = ("ray", "threads")     # cluster.launcher
# a private local cluster offers at least this many logical CPUs (scheduling only), and so
# runs at most max(cores, this) workers
PRIVATE_CLUSTER_MIN_CPUS = 8


@dataclass
class WorkerContext:
    rank: int
    world_size: int
    device: torch.device
    comm: Communicator
    attempt: int = 0          # 0 on the first try, n after n recoveries
    # A second group for the remote feature fetch, driven from the loader thread so it
    # overlaps the training step's all-reduce on `comm` (see Communicator).
    fetch_comm: Communicator | None = None

    def __post_init__(self):
        if self.fetch_comm is None and self.world_size == 1:
            self.fetch_comm = Communicator(self.rank, 1, self.device)

    @classmethod
    def single(cls, device) -> "WorkerContext":
        """The one rank of a run in this process."""
        return cls(0, 1, torch.device(device), Communicator(0, 1, device))

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def set_threads(threads: int) -> None:
    """Ray sets OMP_NUM_THREADS=1 in actors: set numba's and torch's pools explicitly."""
    threads = max(1, int(threads))
    torch.set_num_threads(threads)
    try:
        import numba
        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    except Exception:  # numba's pool may be fixed once launched; torch's setting still holds
        pass


@contextlib.contextmanager
def intra_op_threads(threads: int | None):
    """torch's intra-op thread pool at `threads` inside the block (None: as it is), and as
    it was after it. The setting is the calling thread's (OpenMP's), so ranks that are
    threads of one process each keep their own."""
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _pick_device(config, rank: int) -> torch.device:
    """The worker's torch device (`train.device`; 'auto' = its GPU when it sees one)."""
    want = config.train.device
    if want == "cuda" or (want == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise ConfigError("train.device is 'cuda' but no CUDA GPU is visible to worker "
                              f"{rank}; use 'auto' or 'cpu', or give each worker a GPU "
                              "(cluster.gpus_per_worker: 1)")
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _backend(config, device: torch.device) -> str:
    if config.cluster.backend != "auto":
        return config.cluster.backend
    return "nccl" if device.type == "cuda" else "gloo"


class _Worker:
    """The body of one Ray actor (wrapped with ray.remote lazily, so Ray stays optional)."""

    def __init__(self, rank: int, world_size: int, threads: int):
        self.rank, self.world_size = rank, world_size
        set_threads(threads)

    def __repr__(self) -> str:
        # Ray prefixes the worker's lines with it: "(rank 0 pid=N)", not "(_Worker pid=N)"
        return f"rank {self.rank}"

    def address(self, local: bool) -> tuple[str, int, str]:
        """Where rank 0 meets the others; `local`: every rank runs on rank 0's host, so
        loopback (a routable address would expose the store and gloo pairs to the network)."""
        ip = "127.0.0.1" if local else _node_ip()
        with socket.socket() as s:
            s.bind((ip, 0))
            port = s.getsockname()[1]
        return ip, port, uuid.uuid4().hex

    def node_id(self) -> str:
        import ray
        return ray.get_runtime_context().get_node_id()

    def node_ip(self) -> str:
        """The address of this worker's Ray node (answered even mid-run: see max_concurrency)."""
        return _node_ip()

    def setup(self, master: tuple[str, int], config) -> bool:
        import torch.distributed as dist
        self.device = _pick_device(config, self.rank)
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = master[0], str(master[1])
        store = None
        if ipaddress.ip_address(master[0]).is_loopback:
            # A local cluster listens on nothing but loopback: a file rendezvous (torch's
            # TCPStore would listen on every interface) and gloo on lo.
            store = dist.FileStore(os.path.join(tempfile.gettempdir(),
                                                f"gnnsys-store-{master[2]}"), self.world_size)
            loopback = [n for _, n in socket.if_nameindex() if n.startswith("lo")]
            if loopback:
                os.environ.setdefault("GLOO_SOCKET_IFNAME", loopback[0])
        elif iface := _interface_of(_node_ip()):
            # Across nodes gloo would advertise the address its host name resolves to
            # (often loopback): bind it to the interface holding this Ray node's address.
            os.environ.setdefault("GLOO_SOCKET_IFNAME", iface)
        backend = _backend(config, self.device)
        if self.device.type == "cuda":
            if backend == "gloo":     # gloo has no all_to_all of CUDA tensors
                raise ConfigError("cluster.backend is 'gloo' but the workers train on CUDA "
                                  "GPUs; use 'auto' or 'nccl', or train.device: cpu")
            torch.cuda.set_device(self.device)   # NCCL's object collectives use it
        timeout = timedelta(seconds=config.cluster.timeout_s)
        dist.init_process_group(backend, rank=self.rank, world_size=self.world_size,
                                timeout=timeout, store=store)
        # Feature rows live in host memory (the fused sampler gathers there), so the
        # fetch group is gloo even when gradients go over NCCL.
        self.fetch_group = dist.new_group(backend="gloo", timeout=timeout)
        return True

    def run(self, fn, config, attempt, args):
        comm = Communicator(self.rank, self.world_size, self.device)
        fetch = Communicator(self.rank, self.world_size, "cpu", group=self.fetch_group)
        ctx = WorkerContext(self.rank, self.world_size, self.device, comm, attempt,
                            fetch_comm=fetch)
        return fn(ctx, config, *args)


def _worker_death_errors(ray) -> tuple:
    """Ray errors meaning the worker process is gone: crashed, killed (also by Ray's
    out-of-memory monitor) or its node died. All are recovered from the checkpoint."""
    names = ("RayActorError", "OutOfMemoryError", "WorkerCrashedError", "NodeDiedError")
    return tuple(getattr(ray.exceptions, n) for n in names if hasattr(ray.exceptions, n))


def _is_collective_failure(err: BaseException) -> bool:
    """A torch.distributed error (peer gone, connection reset, collective timeout)."""
    import torch.distributed as dist
    dist_error = getattr(dist, "DistError", ())
    return isinstance(err, dist_error) or "timed out" in str(err).lower()


PING_TIMEOUT_S = 10.0


def _silent_ranks(ray, actors) -> list[int]:
    """Ranks whose worker does not answer a ping: its process died (the ping fails at
    once) or its node or link is down (the ping times out)."""
    pings = [a.node_ip.remote() for a in actors]
    answered, _ = ray.wait(pings, num_returns=len(pings), timeout=PING_TIMEOUT_S)
    silent = []
    for rank, ping in enumerate(pings):
        if ping not in answered:
            silent.append(rank)
            continue
        try:
            ray.get(ping, timeout=0)
        except Exception:
            silent.append(rank)
    return silent


def _describe_silent(silent, nodes) -> str:
    if not silent:
        return "every worker still answers, so a peer is stuck (or was briefly unreachable)"
    return "; ".join(f"worker {rank} on node {nodes[rank]} does not answer: it died, or that "
                     "node or its network link is down" for rank in silent)


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:300]


def _interface_of(ip: str) -> str | None:
    """The name of the network interface holding address `ip` (Linux), else None."""
    try:
        import fcntl
        import struct
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for _, name in socket.if_nameindex():
                try:     # SIOCGIFADDR: the interface's IPv4 address
                    raw = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))
                except OSError:
                    continue
                if socket.inet_ntoa(raw[20:24]) == ip:
                    return name
    except (ImportError, OSError):
        pass
    return None


def _node_ip() -> str:
    try:
        import ray
        return ray.util.get_node_ip_address()
    except Exception:
        return "127.0.0.1"


def init_ray(config) -> None:
    """Join the cluster at cluster.address (or $RAY_ADDRESS, as `ray job submit` sets),
    else start a private local one sized to this machine and bound to loopback.

    Without an address, address="local" starts a new cluster even when a head from
    `ray start --head` is running here: joining that head silently would refuse our
    num_cpus, share its resources with its jobs and expose the run on its interfaces.
    To use a running head, set cluster.address: auto (or its address). The private
    cluster's processes belong to this driver: they stop when it exits, and the actors
    (owned by the driver) die with it, even on kill -9."""
    import ray
    address = config.cluster.address or os.environ.get("RAY_ADDRESS")
    if address:
        check_reachable(address)       # also when this process already runs Ray
    if ray.is_initialized():
        return
    plain_worker_lines()
    kwargs = dict(ignore_reinit_error=True, include_dashboard=False,
                  logging_level=logging.WARNING, log_to_driver=True)
    on_sigterm = signal.getsignal(signal.SIGTERM)
    if address:
        ray.init(address=address, **kwargs)
    else:
        logging.getLogger(RAY_TOKEN_LOGGER).addFilter(_quiet_token_notice)
        sessions = private_sessions_dir()
        for folder in (sessions, sessions.parent):  # the parent: where older gnnsys put them
            end_orphans(folder, os.path.dirname(ray.__file__))
            remove_dead_sessions(folder)
        # Logical CPUs only steer scheduling; leave room so later runs in this process
        # (tests, notebooks) with more workers than cores still get placed.
        need = config.cluster.workers * config.cluster.cpus_per_worker
        ray.init(address="local", num_cpus=max(need, os.cpu_count() or 1,
                                               PRIVATE_CLUSTER_MIN_CPUS),
                 _node_ip_address="127.0.0.1", _temp_dir=str(sessions), **kwargs)
    # ray.init replaces the SIGTERM handler with sys.exit; keep the CLI's (a clean stop).
    if callable(on_sigterm) and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_sigterm)


def private_sessions_dir() -> Path:
    """Where private local clusters keep their sessions (logs, sockets, spilled objects):
    a folder of gnnsys's own, so that what killed runs left can be deleted (Ray keeps
    every session under /tmp/ray for ever, a few MB each). Ray opens the folder it is
    given to every user (0777, as /tmp/ray), so it gets one inside a folder that must be
    this user's own and stays closed to others (0700)."""
    root = os.environ.get("RAY_TMPDIR") or tempfile.gettempdir()     # as Ray's own default
    path = Path(root) / f"gnnsys-ray-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise ConfigError(f"{path} is not a folder of this user (Ray's sockets and logs go "
                          "there); remove it, or set RAY_TMPDIR to another folder")
    path.chmod(0o700)                  # Ray opened it to everyone when it held the sessions
    sessions = path / "ray"
    sessions.mkdir(exist_ok=True)
    return sessions


def _dead_session(name: str) -> bool:
    """A session folder (session_<date>_<driver pid>) whose driver no longer runs."""
    pid = name.rsplit("_", 1)[-1]
    return name.startswith("session_") and pid.isdigit() and not pid_alive(int(pid))


def end_orphans(directory: Path, ray_dir: str) -> list[int]:
    """Kill this user's Ray processes left by a session in `directory` whose driver died,
    and return their pids. A kill -9 of the driver takes its raylet along, but Ray's
    dashboard and runtime-env agents live on for a minute or more, their command line no
    longer naming the session: they are known by the session files they hold open. A
    process is Ray's if its name is `ray::...` or it runs a program from `ray_dir` (Ray's
    package), so a user's `less` of a dead session's log is left alone."""
    prefix = os.path.realpath(directory) + os.sep
    ended = []
    try:
        procs = [p for p in Path("/proc").iterdir() if p.name.isdigit()]
    except OSError:             # no /proc (not Linux): the agents end on their own
        return ended
    for proc in procs:
        try:
            if proc.stat().st_uid != os.getuid() or int(proc.name) == os.getpid():
                continue
            argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
            if not (argv[0].startswith("ray::") or
                    any(a.startswith(ray_dir + os.sep) for a in argv[:2])):
                continue
            held = {os.readlink(fd) for fd in (proc / "fd").iterdir()}
        except (OSError, ValueError):     # gone meanwhile, or not ours to read
            continue
        sessions = {h[len(prefix):].split(os.sep, 1)[0] for h in held if h.startswith(prefix)}
        if sessions and all(_dead_session(name) for name in sessions):
            with contextlib.suppress(OSError):
                os.kill(int(proc.name), signal.SIGKILL)
                ended.append(int(proc.name))
    if ended:
        log.info("ended %d Ray processes left by a killed run (%s)", len(ended),
                 ", ".join(map(str, ended)))
    return ended


def remove_dead_sessions(directory: Path) -> None:
    """Delete the session folders (session_<date>_<driver pid>) whose driver no longer
    runs, except the newest of them: its logs explain the last run."""
    dead = []
    for entry in directory.glob("session_*_*"):
        if entry.is_dir() and not entry.is_symlink() and _dead_session(entry.name):
            dead.append((entry.stat().st_mtime, entry))
    for _, entry in sorted(dead)[:-1]:
        shutil.rmtree(entry, ignore_errors=True)


RAY_TOKEN_LOGGER = "ray._private.authentication.authentication_token_setup"


def _quiet_token_notice(record: logging.LogRecord) -> bool:
    """Ray 2.60 warns on every private cluster that it turned token authentication on:
    that is what we want (its ports listen beyond loopback, README "Security and
    networking"), so the notice is dropped; a warning that it is *off* still shows."""
    return not record.getMessage().startswith("Token authentication is enabled for this")


def plain_worker_lines(stream=None) -> None:
    """Workers' lines reach a log file or pipe without colour codes (Ray wraps its
    "(_Worker pid=N)" prefix in ANSI colours unless RAY_COLOR_PREFIX=0); a terminal keeps
    them, and so does a RAY_COLOR_PREFIX the user set."""
    stream = stream or sys.stdout
    if not (hasattr(stream, "isatty") and stream.isatty()):
        os.environ.setdefault("RAY_COLOR_PREFIX", "0")


def check_reachable(address: str, timeout_s: float = 10.0) -> None:
    """An address of host:port must answer before ray.init, which waits on a dead one for
    ever; "auto", "local" and ray:// addresses are left to Ray."""
    host, sep, port = address.rpartition(":")
    if not sep or "://" in address or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as err:
        raise ConfigError(f"cluster.address {address}: no Ray head answers there ({err}); "
                          "start one (ray start --head) or fix the address") from None


def check_resources(ray, config) -> None:
    """Say at once which resource the cluster lacks (Ray would wait for it forever)."""
    have, world = ray.cluster_resources(), config.cluster.workers
    for resource, key in (("CPU", "cpus_per_worker"), ("GPU", "gpus_per_worker")):
        per_worker = getattr(config.cluster, key)
        if world * per_worker > have.get(resource, 0):
            raise ConfigError(
                f"cluster.workers={world} x cluster.{key}={per_worker:g} needs "
                f"{world * per_worker:g} {resource}s but the Ray cluster has "
                f"{have.get(resource, 0):g}; lower cluster.{key} or join a cluster with "
                f"more {resource}s (cluster.address)")
    if have.get("GPU", 0) and not config.cluster.gpus_per_worker and config.train.device != "cpu":
        log.warning("the Ray cluster has %g GPUs but cluster.gpus_per_worker is 0, so the "
                    "workers see none and train on CPU; set cluster.gpus_per_worker: 1",
                    have["GPU"])


def machine_cores() -> int:
    """The cores this process may run on (a container's or taskset's share, not the host's)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def warn_oversubscribed(config, threads: int) -> None:
    """One line when a private cluster's workers run more threads than this machine has
    cores: they then take turns on the cores, and a starved worker holds every collective
    back, several times slower, which nothing else would show."""
    workers, cores = config.cluster.workers, machine_cores()
    if workers * threads > cores:
        key = "sampler.threads" if config.sampler.threads else "cluster.cpus_per_worker"
        log.warning("%d workers x %d threads (%s) = %d threads on this machine's %d cores: "
                    "the workers will wait on each other; lower %s or cluster.workers",
                    workers, threads, key, workers * threads, cores, key)


def launch(fn, config, *args) -> list:
    """Run `fn(ctx, config, *args)` on `cluster.workers` workers; return their results.

    On a worker death the whole group is torn down and started again with
    `run.resume = True`, so `fn` continues from the last checkpoint; after
    `cluster.max_failures` recoveries the failure is raised as WorkerFailure."""
    world = config.cluster.workers
    threads = config.sampler.threads or config.cluster.cpus_per_worker
    if world == 1 or config.cluster.launcher == "threads":
        set_threads(config.sampler.threads or (os.cpu_count() or 1))
        device = _pick_device(config, 0)
        if world == 1:
            return [fn(WorkerContext.single(device), config, *args)]
        # the feature fetch on a group of its own, as on Ray
        group, fetch = (ThreadGroup(world, config.cluster.timeout_s) for _ in range(2))
        return group.run(lambda comm: fn(WorkerContext(comm.rank, world, device, comm,
                                                       fetch_comm=fetch.comm(comm.rank)),
                                         config, *args))

    if not (config.cluster.address or os.environ.get("RAY_ADDRESS")):
        warn_oversubscribed(config, threads)
    import ray
    init_ray(config)
    check_resources(ray, config)
    attempt = 0
    while True:
        try:
            return _run_group(ray, fn, config, args, world, threads, attempt)
        except WorkerFailure as err:
            if attempt >= config.cluster.max_failures:
                raise WorkerFailure(f"{err}; gave up after cluster.max_failures="
                                    f"{config.cluster.max_failures} recoveries (see the worker's "
                                    "log above; --resume continues from the last "
                                    "checkpoint)") from None
            attempt += 1
            log.warning("%s; restarting all %d workers from the last checkpoint "
                        "(recovery %d of %d)", err, world, attempt, config.cluster.max_failures)
            config = dataclasses.replace(config, run=dataclasses.replace(config.run, resume=True))


def _run_group(ray, fn, config, args, world, threads, attempt):
    # Two threads per actor: a worker blocked in a collective still answers node_ip(),
    # which tells a stuck peer from one whose node or link is gone.
    # The actor's methods run on a thread of its pool: one malloc arena from the process's
    # start, or its step's tensors are mmapped afresh every step (gnnsys/allocator.py).
    env = allocator.worker_environment()
    remote = ray.remote(_Worker).options(
        num_cpus=config.cluster.cpus_per_worker, num_gpus=config.cluster.gpus_per_worker,
        max_restarts=0, max_concurrency=2, **({"runtime_env": {"env_vars": env}} if env else {}))
    actors = [remote.remote(rank, world, threads) for rank in range(world)]
    pending = []
    try:
        start = config.cluster.start_timeout_s
        # A worker's own idea of its node's address is the routable one, even on a private
        # loopback cluster: one Ray node for every rank is what makes the group local.
        local = len(set(ray.get([a.node_id.remote() for a in actors], timeout=start))) == 1
        master = ray.get(actors[0].address.remote(local), timeout=start)
        try:
            ray.get([a.setup.remote(master, config) for a in actors], timeout=start)
        except ray.exceptions.RayTaskError as err:      # e.g. no GPU: the cause is one line
            raise getattr(err, "cause", err) from None
        nodes = ray.get([a.node_ip.remote() for a in actors], timeout=start)
        refs = [a.run.remote(fn, config, attempt, args) for a in actors]
        rank_of = {ref: r for r, ref in enumerate(refs)}
        pending, results = list(refs), {}
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            ref = done[0]
            try:
                results[rank_of[ref]] = ray.get(ref)
            except _worker_death_errors(ray) as err:
                rank = rank_of[ref]
                raise WorkerFailure(f"worker {rank} on node {nodes[rank]} died "
                                    f"({type(err).__name__})") from None
            except ray.exceptions.RayTaskError as err:
                cause = err.cause if hasattr(err, "cause") else err
                if isinstance(cause, (KeyboardInterrupt, SystemExit)):
                    raise WorkerFailure(f"worker {rank_of[ref]} was stopped") from None
                # A peer's death often reaches us first as its partner's failed read
                # (gloo: "Connection reset by peer", a plain RuntimeError): whenever a
                # peer is gone, the failure is that peer's, and recoverable.
                silent = _silent_ranks(ray, actors)
                if silent or _is_collective_failure(cause):
                    raise WorkerFailure(
                        f"worker {rank_of[ref]}: a collective failed ({_first_line(cause)}); "
                        f"{_describe_silent(silent, nodes)} (collectives give up after "
                        f"cluster.timeout_s={config.cluster.timeout_s}s)") from None
                raise cause from None
        return [results[r] for r in range(world)]
    except ray.exceptions.GetTimeoutError:
        raise WorkerFailure(f"workers did not start within cluster.start_timeout_s="
                            f"{config.cluster.start_timeout_s}s; the Ray cluster is busy or "
                            "slow to start processes (raise cluster.start_timeout_s)") from None
    finally:
        for a in actors:
            ray.kill(a, no_restart=True)
        # The survivors' results are errors once the group is torn down; read, they are
        # handled (unread, Ray prints each with its traceback after our one line)
        for ref in pending:
            with contextlib.suppress(Exception):
                ray.get(ref, timeout=10)
        time.sleep(0.1)
