"""A warm stack interpreter (a zygote): it imports the stack's runtime once, then forks a fresh
worker for every request, so a stack pays its framework's import (0.2-2.3 CPU-s, about
400 MB) once per cycle instead of once per worker.

Started with the stack's interpreter like a worker (``bootstrap.ZYGOTE_SOURCE``, or
``remote_boot.ZYGOTE_SOURCE`` on another host) and its spec (the packages, the runtime class,
the socket to listen on). It:

1. sends what a library prints to stderr (fd 1 is its reply channel), registers the worker's
   packages, imports the request loop (``auditor.worker.main``: numpy, the protocol) and the
   runtime class's module, then what the class names in ``preload`` (``("mindspore",)``):
   imports only, no context, no tensor, so no framework thread pool has run work;
2. listens on a unix socket (mode 0600 in a 0700 directory) and writes one JSON line on fd 1:
   its pid, the threads it has (what a fork copies: the main thread and, with numpy's
   OpenBLAS on Python 3.11, its server thread, which OpenBLAS quiesces around a fork itself),
   the import's CPU seconds, its resident memory;
3. serves connections (a ``{"status": true}`` request without descriptors is answered with
   what it has forked so far). A connection sends one request (a 4-byte length and JSON: the
   worker's spec, its environment, its directory) with three descriptors attached
   (SCM_RIGHTS: the new worker's stdin, stdout and stderr). The zygote forks; the child
   starts a session of its own (its own process group, killed as a whole as a cold worker
   is), dies with the zygote (PR_SET_PDEATHSIG), takes the descriptors as 0, 1 and 2, the
   requester's environment and directory, and runs ``auditor.worker.main.serve``: from there
   on it is a worker like any other. The zygote answers ``{"pid": N}`` and, when it reaps the
   child, ``{"exit": status}`` (a negative signal number, as subprocess reports it) on the same
   connection. A connection that hangs up first (its auditor died) gets its worker's process
   group killed;
4. refuses to fork (``{"error": "stale: ..."}``) once a preloaded module's files changed on
   disk (the runtime was upgraded under it): the auditor then starts a fresh one;
5. ends when its stdin closes (its owner is done or gone): it kills what is left of its
   children's process groups, reaps them and removes its socket (and, on another host, its
   directory).

A runtime that cannot be forked after its import (it starts threads when imported) opts out in
its spec (``RuntimeSpec.warm``) and its workers start cold. Python 3.7 compatible, standard
library only (numpy and the runtime are the stack's own, imported by the preload).
"""

import array
import contextlib
import ctypes
import importlib
import json
import os
import select
import shutil
import signal
import socket
import struct
import sys
import time
import traceback
import types

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
ZYGOTE_NAME = b"auditor-zygote"
WORKER_NAME = b"auditor-worker"
"""The process names (``/proc/PID/comm``) of a zygote and of a worker forked from it: both run
the zygote's command line, so that is how they are told apart."""
MAX_REQUEST = 4 * 1024 * 1024
REQUEST_SECONDS = 10.0
_LEN = struct.Struct(">I")


def _prctl(option, value):
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except Exception:  # not Linux, or no prctl: names and death signals are a nicety
        return -1


def set_name(name):
    _prctl(PR_SET_NAME, ctypes.c_char_p(name))


def threads():
    """The names of this process's threads (what a fork copies into the child as memory)."""
    try:
        tasks = sorted(os.listdir("/proc/self/task"), key=int)
    except OSError:
        return []
    names = []
    for task in tasks:
        try:
            with open("/proc/self/task/%s/comm" % task) as f:
                names.append(f.read().strip())
        except OSError:
            names.append("?")
    return names


def rss_kib():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def register(packages):
    """Register ``(name, path)`` packages without running their ``__init__`` (bootstrap's
    REGISTER); a name already registered at the same path is kept (its modules stay imported)."""
    for name, path in packages:
        known = sys.modules.get(name)
        if known is not None and list(getattr(known, "__path__", None) or []) == [path]:
            continue
        module = types.ModuleType(name)
        module.__path__ = [path]
        sys.modules[name] = module
        parent, _, child = name.rpartition(".")
        if parent and parent in sys.modules:
            setattr(sys.modules[parent], child, module)


def _stat(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_ino, st.st_mtime_ns, st.st_size]


def preload(runtime_class):
    """Import the request loop, the runtime class's module and what the class preloads; the
    files they came from, stamped (so a runtime changed on disk is noticed before a fork)."""
    importlib.import_module("auditor.worker.main")
    module_name, _, attr = runtime_class.partition(":")
    cls = getattr(importlib.import_module(module_name), attr)
    names = [str(n) for n in getattr(cls, "preload", ()) or ()]
    for name in names:
        importlib.import_module(name)
    stamps = {}
    for name in names:
        path = getattr(sys.modules.get(name), "__file__", None)
        if path:
            stamps[path] = _stat(path)
            stamps[os.path.dirname(path)] = _stat(os.path.dirname(path))
    return names, stamps


def recv_request(conn):
    """One request and its three descriptors from a fresh connection (bounded in size and time)."""
    conn.settimeout(REQUEST_SECONDS)
    fds = array.array("i")
    data, ancdata, _flags, _addr = conn.recvmsg(65536, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
    fds = list(fds)
    try:
        while len(data) < _LEN.size:
            more = conn.recv(65536)
            if not more:
                raise EOFError("connection closed in the request")
            data += more
        (size,) = _LEN.unpack(data[: _LEN.size])
        if size > MAX_REQUEST:
            raise ValueError("request of %d bytes" % size)
        body = data[_LEN.size :]
        while len(body) < size:
            more = conn.recv(min(65536, size - len(body)))
            if not more:
                raise EOFError("connection closed in the request")
            body += more
        request = json.loads(body.decode("utf-8"))
        if not isinstance(request, dict):
            raise ValueError("a request is a JSON object")
        if len(fds) != 3 and not (request.get("status") and not fds):
            # a status request ({"status": true}) sends none; a fork, the worker's three
            raise ValueError("a request to fork needs three descriptors")
    except BaseException:
        for fd in fds:
            _close(fd)
        raise
    conn.settimeout(None)
    return request, fds


def send_line(conn, message):
    try:
        conn.sendall(json.dumps(message).encode("utf-8") + b"\n")
        return True
    except OSError:
        return False


def _close(fd):
    with contextlib.suppress(OSError):
        os.close(fd)


def status_of(wait_status):
    """A wait status as subprocess reports a return code (-N: killed by signal N)."""
    if os.WIFSIGNALED(wait_status):
        return -os.WTERMSIG(wait_status)
    if os.WIFEXITED(wait_status):
        return os.WEXITSTATUS(wait_status)
    return -signal.SIGKILL


class Child(object):
    def __init__(self, pid, conn, workdir, stderr_fd):
        self.pid, self.conn, self.workdir, self.stderr_fd = pid, conn, workdir, stderr_fd


class Zygote(object):
    """The zygote's loop; ``spec``: packages, runtime_class, socket (the path to listen on),
    remote (a worker's directory is made here, and its log tail is sent back on a fatal signal)."""

    def __init__(self, spec, reply_fd):
        self.spec = spec
        self.reply_fd = reply_fd
        self.pid = os.getpid()
        self.children = {}
        self.watched = {}
        """A running worker's connection (its descriptor) -> the worker's pid."""
        self.poller = None
        self.stale = None
        self.stamps = {}
        self.listener = None
        self.wake_r = self.wake_w = None
        self.count = 0
        self.startup_env = {}

    # -- start -------------------------------------------------------------------------------
    def start(self):
        started = time.time()
        cpu = time.process_time()
        # The environment as it was before the runtime's import, which may change it (MindSpore
        # prepends its lib/ to LD_LIBRARY_PATH, sets MS_DEV_* switches): a child applies the
        # requester's differences to it and keeps what the import set, as a cold worker has.
        self.startup_env = dict(os.environ)
        names, self.stamps = preload(self.spec["runtime_class"])
        seconds, cpu = time.time() - started, time.process_time() - cpu
        path = self.spec["socket"]
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if os.path.exists(path):
            os.unlink(path)  # a socket left by a zygote that was killed: its address, not a live one
        old = os.umask(0o177)
        try:
            self.listener.bind(path)
        finally:
            os.umask(old)
        self.listener.listen(64)
        self.listener.setblocking(False)
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(s, lambda *_: self.shutdown(1))
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        ready = {
            "pid": self.pid,
            "socket": path,
            "python": "%d.%d.%d" % sys.version_info[:3],
            "preloaded": names,
            "seconds": seconds,
            "cpu_seconds": cpu,
            "threads": threads(),
            "rss_kib": rss_kib(),
        }
        os.write(self.reply_fd, json.dumps(ready).encode("utf-8") + b"\n")

    # -- the loop ------------------------------------------------------------------------------
    def serve(self):
        self.poller = select.poll()
        self.poller.register(0, select.POLLIN | select.POLLHUP | select.POLLERR)
        self.poller.register(self.listener.fileno(), select.POLLIN)
        self.poller.register(self.wake_r, select.POLLIN)
        while True:
            for fd, _events in self.poller.poll(5000):
                if fd == 0:
                    try:
                        data = os.read(0, 4096)
                    except OSError:
                        data = b""
                    if not data:
                        self.shutdown(0)
                elif fd == self.wake_r:
                    with contextlib.suppress(OSError):
                        os.read(self.wake_r, 512)
                elif fd == self.listener.fileno():
                    self.accept()
                elif fd in self.watched:
                    self.readable(self.watched[fd])
            self.reap()

    def watch(self, child):
        fd = child.conn.fileno()
        self.watched[fd] = child.pid
        self.poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)

    def unwatch(self, child):
        if child.conn is None:
            return
        fd = child.conn.fileno()
        if self.watched.pop(fd, None) is not None:
            self.poller.unregister(fd)
        child.conn.close()
        child.conn = None

    def readable(self, pid):
        """The requester wrote to or closed a running worker's connection: it sends nothing
        after its request, so this is its end (it is done, or gone)."""
        child = self.children.get(pid)
        if child is None or child.conn is None:
            return
        try:
            data = child.conn.recv(4096, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.hung_up(pid)

    def accept(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            conn.setblocking(True)
            try:
                request, fds = recv_request(conn)
            except Exception as exc:
                send_line(conn, {"error": "bad request: %s" % (exc,)})
                conn.close()
                continue
            if request.get("status") and not fds:
                send_line(conn, self.status())
                conn.close()
                continue
            self.fork(conn, request, fds)

    def status(self):
        """What it has done: its workers forked and running, its threads and memory now."""
        return {
            "pid": self.pid,
            "forks": self.count,
            "running": sorted(self.children),
            "threads": threads(),
            "rss_kib": rss_kib(),
            "stale": self.stale,
        }

    def _changed(self):
        for path, stamp in self.stamps.items():
            if _stat(path) != stamp:
                return path
        return None

    def fork(self, conn, request, fds):
        if self.stale is None:
            changed = self._changed()
            if changed is not None:
                self.stale = "stale: %s changed on disk since this warm worker imported it" % changed
        if self.stale is not None:
            send_line(conn, {"error": self.stale})
            conn.close()
            for fd in fds:
                _close(fd)
            return
        self.count += 1
        workdir = request.get("workdir")
        made = None
        try:
            if not workdir:
                made = workdir = os.path.join(os.path.dirname(self.spec["socket"]), "w-%d" % self.count)
                os.mkdir(workdir, 0o700)
        except OSError as exc:
            send_line(conn, {"error": "cannot make the worker's directory: %s" % (exc,)})
            conn.close()
            for fd in fds:
                _close(fd)
            return
        sys.stdout.flush()
        sys.stderr.flush()
        # The pid is answered only once the child leads its own session: a kill of its
        # process group sent right after the answer must find the group.
        settled_r, settled_w = os.pipe()
        try:
            pid = os.fork()
        except OSError as exc:
            _close(settled_r)
            _close(settled_w)
            send_line(conn, {"error": "fork failed: %s" % (exc,)})
            conn.close()
            for fd in fds:
                _close(fd)
            if made:
                shutil.rmtree(made, ignore_errors=True)
            return
        if pid == 0:
            _close(settled_r)
            self.child(conn, request, fds, workdir, settled_w)  # never returns
        _close(settled_w)
        with contextlib.suppress(OSError):
            os.read(settled_r, 1)  # b"!" once it has its session, b"" if it died first
        _close(settled_r)
        keep = os.dup(fds[2]) if self.spec.get("remote") else None
        for fd in fds:
            _close(fd)
        child = self.children[pid] = Child(pid, conn, made, keep)
        if send_line(conn, {"pid": pid, "threads": len(threads())}):
            self.watch(child)
        else:
            self.hung_up(pid)

    def child(self, conn, request, fds, workdir, settled):
        """In the forked child: become a worker (never returns)."""
        code = 1
        try:
            os.setsid()
            os.write(settled, b"!")
            _close(settled)
            signal.set_wakeup_fd(-1)
            for s in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGPIPE):
                signal.signal(s, signal.SIG_DFL)
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != self.pid:
                os._exit(1)  # the zygote died between fork and prctl
            set_name(WORKER_NAME)
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            for fd in fds:
                if fd > 2:
                    _close(fd)
            for other in [c.conn for c in self.children.values() if c.conn is not None] + [conn]:
                other.close()
            for child in self.children.values():
                if child.stderr_fd is not None:
                    _close(child.stderr_fd)
            self.listener.close()
            for fd in (self.wake_r, self.wake_w, self.reply_fd):
                _close(fd)
            env = request.get("env")
            if env is not None:
                self.take_environment(env)
            os.chdir(workdir)
            spec = dict(request["spec"])
            spec["workdir"] = workdir
            if self.spec.get("remote"):
                lib = self.spec["lib"]
                spec["packages"] = [[n, os.path.join(lib, *n.split("."))] for n, _ in spec["packages"]]
            register(spec["packages"])
            from auditor.worker.main import serve

            serve(spec)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            traceback.print_exc()
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)

    def take_environment(self, env):
        """In a child: the requester's environment, as a cold worker of it would have it after
        the runtime's import. Only variables the runtime cannot have read at import differ (a
        zygote serves requesters whose other variables it was started with): those are set or
        unset; what the import itself set stays. The fingerprint's record of the environment the
        worker was started with (taken before the import) becomes the requester's."""
        startup = self.startup_env
        for name in [n for n in startup if n not in env]:
            os.environ.pop(name, None)
        for name, value in env.items():
            if startup.get(name) != value:
                os.environ[name] = value
        from auditor.worker import fingerprint

        fingerprint.STARTUP_ENVIRON = fingerprint.stack_environ(dict(env))

    # -- children ------------------------------------------------------------------------------
    def hung_up(self, pid):
        """The requester's connection closed while its worker runs: nobody can end it but us."""
        child = self.children.get(pid)
        if child is None:
            return
        self.unwatch(child)
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)

    def reap(self):
        for pid in list(self.children):
            try:
                done, wait_status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, wait_status = pid, 0
            if not done:
                continue
            child = self.children.pop(pid)
            status = status_of(wait_status)
            if child.stderr_fd is not None:
                if status < 0 and child.workdir:
                    # Sent back the way a cold remote worker's supervisor does: what the runtime
                    # wrote during the fatal request, then the signal.
                    try:
                        with open(os.path.join(child.workdir, "request.log"), "rb") as f:
                            f.seek(0, 2)
                            f.seek(max(0, f.tell() - 16384))
                            os.write(child.stderr_fd, f.read())
                        os.write(child.stderr_fd, b"\nauditor worker: killed by signal %d\n" % -status)
                    except OSError:
                        pass
                _close(child.stderr_fd)
            if child.workdir:
                shutil.rmtree(child.workdir, ignore_errors=True)
            if child.conn is not None:
                send_line(child.conn, {"exit": status})
                self.unwatch(child)

    def shutdown(self, code):
        for pid in list(self.children):
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
        deadline = time.time() + 5
        while self.children and time.time() < deadline:
            self.reap()
            if self.children:
                time.sleep(0.01)
        with contextlib.suppress(OSError):
            os.unlink(self.spec["socket"])
        if self.spec.get("own_dir"):
            shutil.rmtree(self.spec["own_dir"], ignore_errors=True)
        os._exit(code)


def main(spec):
    """The zygote: imports, listens, says ready on fd 1, forks workers until stdin closes."""
    reply_fd = os.dup(1)
    os.dup2(2, 1)  # whatever a library prints goes to the log, never into the ready line
    set_name(ZYGOTE_NAME)
    zygote = Zygote(spec, reply_fd)
    try:
        zygote.start()
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        traceback.print_exc()
        message = {"error": "%s: %s" % (type(exc).__name__, exc)}
        with contextlib.suppress(OSError):
            os.write(reply_fd, json.dumps(message).encode("utf-8") + b"\n")
        if spec.get("own_dir"):
            shutil.rmtree(spec["own_dir"], ignore_errors=True)
        os._exit(3)
    zygote.serve()
