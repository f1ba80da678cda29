"""The first lines a stack interpreter runs on another host.

Nothing is installed there, and nothing secret travels on a command line (where ``ps``
shows it to every user of both machines for the worker's whole life). The command line is
``env -u PYTHONPATH -u PYTHONHOME PYTHON -c LAUNCH SPEC`` (the spec: runtime, device,
package names, the payload's digest). Everything else comes on stdin, ahead of the protocol
stream, each as an 8-byte big-endian length and the bytes:

1. the stack's environment (``[stacks.X] env``, JSON): ``LAUNCH`` reads it and the next
   frame, then ``exec``s the interpreter again with that environment, so that what is read
   only at process start (``LD_LIBRARY_PATH``, ``PYTHON*``) takes effect, and ``SOURCE`` on
   its command line;
2. ``SOURCE`` itself;
3. the worker code as one zip, checked against the digest in the spec.

``SOURCE``

- removes the temporary directories that crashed workers of this user left behind
  (``auditor-w-<pid>-*`` whose pid is gone), then makes its own, mode 0700;
- unpacks the zip there and registers its packages the way the local bootstrap does;
- forks: the child serves the protocol (``auditor.worker.main.serve``) in its own process
  group, and dies with its parent (PR_SET_PDEATHSIG on Linux); the parent supervises.
  When the child exits, the parent removes the directory and exits with its status. When
  the connection goes away while the child still runs (stdout hung up: ssh dropped, the
  auditor killed its end after a deadline), the parent kills the child's process group,
  stopped or not, and removes the directory: no process and no file is left behind.

Python 3.7 compatible, standard library only.
"""

LAUNCH = r"""
import json, os, struct, sys
def read_exact(n):
    chunks = []
    while n:
        chunk = os.read(0, min(n, 1 << 20))
        if not chunk:
            sys.stderr.write("auditor worker: connection closed while receiving the environment\n")
            sys.exit(3)
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)
def frame():
    return read_exact(struct.unpack(">Q", read_exact(8))[0])
env = dict(os.environ)
env.update(json.loads(frame().decode("utf-8")))
source = frame().decode("utf-8")
os.execve(sys.executable, [sys.executable, "-c", source, sys.argv[1]], env)
"""
"""Run with ``-c``: take the environment and ``SOURCE`` from stdin (reading exactly their
frames, so the zip after them stays in the pipe for ``SOURCE``), then become ``SOURCE``."""

_UNPACK = r"""
import hashlib, io, json, os, select, shutil, signal, struct, sys, tempfile, types, zipfile
spec = json.loads(sys.argv[1])
def read_exact(n):
    chunks = []
    while n:
        chunk = os.read(0, min(n, 1 << 20))
        if not chunk:
            sys.stderr.write("auditor worker: connection closed while receiving the worker code\n")
            sys.exit(3)
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)
def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass
    return True
base = tempfile.gettempdir()
try:
    names = os.listdir(base)
except OSError:
    names = []
for name in names:
    parts = name.split("-")
    if len(parts) < 4 or parts[0] != "auditor" or parts[1] != "w" or not parts[2].isdigit():
        continue
    path = os.path.join(base, name)
    try:
        st = os.lstat(path)
    except OSError:
        continue
    mine = st.st_uid == os.getuid() and os.path.isdir(path) and not os.path.islink(path)
    if mine and not alive(int(parts[2])):
        shutil.rmtree(path, ignore_errors=True)
workdir = tempfile.mkdtemp(prefix="auditor-w-%d-" % os.getpid())
os.chmod(workdir, 0o700)
child = None
def end_marked():
    # what the worker started carries its mark (AUDITOR_WORKER, auditor.worker.fingerprint)
    # wherever it went: another session, another directory
    needle = ("AUDITOR_WORKER=" + workdir).encode()
    try:
        pids = [int(n) for n in os.listdir("/proc") if n.isdigit() and int(n) != os.getpid()]
    except OSError:
        return
    for pid in pids:
        try:
            with open("/proc/%d/environ" % pid, "rb") as f:
                if needle in f.read().split(b"\0"):
                    os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
def cleanup(*_):
    if child:
        try:
            os.killpg(child, signal.SIGKILL)
        except OSError:
            pass
        try:
            os.waitpid(child, 0)
        except OSError:
            pass
    end_marked()
    shutil.rmtree(workdir, ignore_errors=True)
    os._exit(1)
for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGPIPE):
    signal.signal(s, cleanup)
try:
    size = struct.unpack(">Q", read_exact(8))[0]
    data = read_exact(size)
    if hashlib.sha256(data).hexdigest() != spec["payload"]:
        sys.stderr.write("auditor worker: the worker code arrived damaged (digest mismatch)\n")
        cleanup()
    lib = os.path.join(workdir, "lib")
    zipfile.ZipFile(io.BytesIO(data)).extractall(lib)
    del data
except BaseException as exc:
    if not isinstance(exc, SystemExit):
        sys.stderr.write("auditor worker: cannot unpack the worker code: %s\n" % (exc,))
    cleanup()
spec["packages"] = [[n, os.path.join(lib, *n.split("."))] for n, _ in spec["packages"]]
def register(packages):
    for name, path in packages:
        module = types.ModuleType(name)
        module.__path__ = [path]
        sys.modules[name] = module
        parent, _, leaf = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], leaf, module)
"""
"""What ``SOURCE`` and ``ZYGOTE_SOURCE`` share: remove dead workers' directories, make this
one's, receive the worker code, check it and unpack it into ``lib``; ``register`` the worker's
packages there the way the local bootstrap does."""

SOURCE = (
    _UNPACK
    + r"""
spec["workdir"] = workdir
spec["remote"] = {"ssh_connection": os.environ.get("SSH_CONNECTION"), "supervisor": os.getpid()}
sys.stdout.flush()
sys.stderr.flush()
child = os.fork()
if child == 0:
    child = None
    os.setpgid(0, 0)
    try:
        import ctypes
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)
    except Exception:
        pass
    if os.getppid() == 1:
        os._exit(1)
    for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGPIPE):
        signal.signal(s, signal.SIG_DFL)
    os.environ["AUDITOR_WORKER"] = workdir
    code = 0
    try:
        register(spec["packages"])
        from auditor.worker.main import serve
        serve(spec)
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 1
    sys.stderr.flush()
    os._exit(code)
try:
    os.setpgid(child, child)
except OSError:
    pass
os.close(0)
# Woken at once by the child's exit (SIGCHLD through a wakeup pipe) or by the connection
# hanging up; the timeout is only a safety net, nothing waits on it.
wake_r, wake_w = os.pipe()
os.set_blocking(wake_w, False)
signal.set_wakeup_fd(wake_w)
signal.signal(signal.SIGCHLD, lambda *_: None)
poller = select.poll()
poller.register(1, select.POLLERR | select.POLLHUP)
poller.register(wake_r, select.POLLIN)
while True:
    pid, status = os.waitpid(child, os.WNOHANG)
    if pid:
        child = None
        if os.WIFSIGNALED(status):
            # What the runtime wrote during the fatal request is in request.log, about to be
            # removed: send its tail back on stderr, the way a local worker's log is read.
            try:
                with open(os.path.join(workdir, "request.log"), "rb") as f:
                    f.seek(0, 2)
                    f.seek(max(0, f.tell() - 16384))
                    os.write(2, f.read())
            except OSError:
                pass
            os.write(2, b"\nauditor worker: killed by signal %d\n" % os.WTERMSIG(status))
        end_marked()
        shutil.rmtree(workdir, ignore_errors=True)
        if os.WIFEXITED(status):
            os._exit(os.WEXITSTATUS(status))
        os._exit(128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else 1)
    for fd, _ in poller.poll(5000):
        if fd == wake_r:
            os.read(wake_r, 512)
        else:
            cleanup()
"""
)

ZYGOTE_SOURCE = (
    _UNPACK
    + r"""
spec["socket"] = os.path.join(workdir, "zygote.sock")
spec["lib"] = lib
spec["own_dir"] = workdir
spec["remote"] = True
for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGPIPE):
    signal.signal(s, signal.SIG_DFL)
register(spec["packages"])
from auditor.worker.zygote import main
main(spec)
"""
)
"""A warm stack interpreter on another host (``[worker] warm``): the same environment frame,
then this instead of ``SOURCE``: it unpacks the worker code once into its directory and
becomes a zygote (``auditor.worker.zygote``) listening on ``<its directory>/zygote.sock``,
until its connection ends (its stdin closes). Each worker is then started by ``CONNECT``."""

CONNECT = r"""
import array, json, os, select, signal, socket, struct, sys
args = json.loads(sys.argv[1])
def gone(why):
    sys.stderr.write("auditor worker: the warm worker of this stack is gone (%s)\n" % (why,))
    sys.exit(75)
conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    conn.connect(args["socket"])
except OSError as exc:
    gone(exc)
spec = args["spec"]
spec["remote"] = {"ssh_connection": os.environ.get("SSH_CONNECTION"), "supervisor": os.getpid()}
body = json.dumps({"spec": spec, "env": None, "workdir": None}).encode("utf-8")
data = struct.pack(">I", len(body)) + body
sent = conn.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
conn.sendall(data[sent:])
buffer = b""
pid = None
poller = select.poll()
poller.register(conn.fileno(), select.POLLIN)
poller.register(1, select.POLLERR | select.POLLHUP)
while True:
    for fd, _ in poller.poll(5000):
        if fd == 1:
            if pid:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    pass
            sys.exit(1)
        chunk = conn.recv(4096)
        if not chunk:
            if pid is None:
                gone("it closed the connection")
            os._exit(128 + signal.SIGKILL)
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            message = json.loads(line.decode("utf-8"))
            if "pid" in message:
                pid = message["pid"]
            elif "exit" in message:
                status = message["exit"]
                os._exit(status if status >= 0 else 128 - status)
            else:
                gone(message.get("error"))
"""
"""Run with ``-c`` on the host for each worker of a warm remote stack: it hands its stdin,
stdout and stderr (the ssh session) to the stack's zygote at ``args["socket"]``, which forks a
worker on them, and supervises it as ``SOURCE`` does: exits with the worker's status (128 +
the signal), and kills the worker's process group when the connection goes away. Exit 75:
no zygote answered (the auditor starts the worker cold instead)."""
