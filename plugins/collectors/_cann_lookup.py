"""Which of the host's CANN packages each framework in the stack would load, and on what
basis, read from the installed files and the stack's environment (never by importing a
framework: that would load native libraries).

- MindSpore checks the CANN its ``AscendEnvChecker`` finds (``run_check/_check_version.py``,
  read here with ``ast``): 2.0 tries fixed paths (``nnae/latest``, ``ascend-toolkit/latest``,
  ``latest`` under ``/usr/local/Ascend``: the first whose ``compiler/version.info`` exists;
  its plugin's RPATH lists the same directories first, so the libraries come from there too);
  2.10 reads ``$ASCEND_HOME_PATH/compiler/version.info`` only and skips its check with a
  warning when the variable is unset, while its libraries come from ``LD_LIBRARY_PATH``
  (its RPATH is ``$ORIGIN``-relative only).
- MindSpore Lite 2.0's Python package names no CANN path and no variable; its libraries need
  ``libascendcl.so`` with an ``$ORIGIN``-only RPATH: the dynamic loader decides, from
  ``LD_LIBRARY_PATH`` and then the directories of ``/etc/ld.so.conf``.

A choice (``choose_*``) says ``package`` (the ``id`` of a ``cann.packages`` entry, or None),
``basis`` (``lookup``: the framework's own lookup order; ``environment``: a variable,
named in ``source``; ``inference``: the auditor's guess, ``probable`` then true), ``how`` in
words, ``tried`` (the paths looked at, in order), ``checked`` (the package whose compiler
file the framework's own version check reads, or None when it skips its check or has none)
and ``libraries`` (the package whose ``libascendcl.so`` the loader would find first).
Facts from MindSpore 2.0.0 / 2.10.0 / Lite 2.0.0 as installed (notes in FACTS.md §3).

Runs inside stacks: Python 3.7, standard library only.
"""

import ast
import glob
import os

from auditor.plugins.collectors._files import Unreadable, read_text, under

DEFAULT_ROOT = "/usr/local/Ascend/"
COMPILER_FILE = "/compiler/version.info"
CHECKER = os.path.join("run_check", "_check_version.py")
LIBRARY = "libascendcl.so"
# Where the packages' set_env.sh scripts point ASCEND_HOME_PATH and LD_LIBRARY_PATH: the
# auditor's guess when the stack's environment names no CANN. Lite: the inference runtime
# (nnrt) first.
TOOLKIT_GUESS = ("ascend-toolkit", "cann", "latest", "nnae")
LITE_GUESS = ("nnrt",) + TOOLKIT_GUESS


# -- reading the framework ---------------------------------------------------------------------
def find_package(paths, name):
    """The directory of the top-level package ``name`` first on ``paths``, or None."""
    for entry in paths:
        candidate = os.path.join(entry or ".", name)
        if os.path.isfile(os.path.join(candidate, "__init__.py")):
            return os.path.abspath(candidate)
    return None


def parse_cann_lookup(source, filename):
    """Where ``AscendEnvChecker.__init__`` looks for the CANN it checks:
    ``{"env": "ASCEND_HOME_PATH" or None, "paths": [fixed .../compiler/version.info, in order]}``.
    Read from the installed checker, so a release that changes the order needs no table."""
    init = checker_init(parse_source(source, filename), filename)
    paths, env = [], None
    for node in sorted(
        (n for n in ast.walk(init) if hasattr(n, "lineno")), key=lambda n: (n.lineno, n.col_offset)
    ):
        value = literal(node) if type(node).__name__ in ("Str", "Constant") else None
        if (
            isinstance(value, str)
            and value.startswith("/")
            and value.endswith(COMPILER_FILE)
            and value != COMPILER_FILE
            and value not in paths
        ):
            paths.append(value)
        if env is None and isinstance(node, ast.Call) and node.args:
            name = node.func.attr if isinstance(node.func, ast.Attribute) else None
            arg = literal(node.args[0]) if name in ("getenv", "get") else None
            if isinstance(arg, str) and arg.startswith("ASCEND_") and arg.endswith(("HOME_PATH", "_HOME")):
                env = arg
    if not paths and env is None:
        raise ValueError("%s: AscendEnvChecker.__init__ names no compiler/version.info" % filename)
    return {"env": env, "paths": paths}


def read_lookup(package_dir):
    """(lookup, None) or (None, why) for the MindSpore installed at ``package_dir``."""
    checker = os.path.join(package_dir, CHECKER)
    try:
        return parse_cann_lookup(read_text(checker, limit=1024 * 1024), checker), None
    except (Unreadable, ValueError) as exc:
        return None, str(exc)


def checker_init(tree, filename):
    for cls in tree.body:
        if isinstance(cls, ast.ClassDef) and cls.name == "AscendEnvChecker":
            for init in cls.body:
                if isinstance(init, ast.FunctionDef) and init.name == "__init__":
                    return init
            raise ValueError("%s: AscendEnvChecker has no __init__" % filename)
    raise ValueError("%s: no class AscendEnvChecker" % filename)


def parse_source(source, filename):
    try:
        return ast.parse(source, filename)
    except SyntaxError as exc:
        raise ValueError("%s: cannot parse (line %s: %s)" % (filename, exc.lineno, exc.msg)) from None


def literal(node):
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None


# -- the dynamic loader ------------------------------------------------------------------------
def loader_dirs(environ, system_root):
    """[(directory, where it comes from)] in the order the dynamic loader searches them for a
    library with no RPATH of its own: ``LD_LIBRARY_PATH``, then ``/etc/ld.so.conf`` and the
    ``*.conf`` files it includes (one level)."""
    out = [(d, "LD_LIBRARY_PATH") for d in (environ.get("LD_LIBRARY_PATH") or "").split(":") if d]
    conf = under(system_root, "etc/ld.so.conf")
    files = [conf]
    try:
        text = read_text(conf)
    except Unreadable:
        text = ""
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("include "):
            pattern = line.split(None, 1)[1]
            files += sorted(glob.glob(under(system_root, pattern) if pattern.startswith("/") else pattern))
    for path in files:
        try:
            lines = read_text(path).splitlines() if path != conf else text.splitlines()
        except Unreadable:
            continue
        for line in lines:
            line = line.split("#", 1)[0].strip()
            if line and not line.startswith("include ") and line.startswith("/"):
                out.append((under(system_root, line), "/etc/ld.so.conf"))
    return out


def library_home(directory):
    """The CANN home a library directory belongs to: ``<home>/lib64`` or
    ``<home>/<arch>-linux/lib64`` -> ``<home>``."""
    parent = os.path.dirname(os.path.normpath(directory))
    return os.path.dirname(parent) if os.path.basename(parent).endswith("-linux") else parent


def containing(packages, path):
    """The entry of ``packages`` whose home holds ``path``: by the path as written first (a
    library directory under ``ascend-toolkit/latest`` belongs to that entry even where
    ``latest`` is a directory of links into a release), then as real paths."""
    for resolve in (os.path.normpath, os.path.realpath):
        where = resolve(path)
        best = None
        for entry in packages:
            home = resolve(entry["home"])
            inside = where == home or where.startswith(home.rstrip("/") + "/")
            if inside and (best is None or len(home) > len(resolve(best["home"]))):
                best = entry
        if best is not None:
            return best
    return None


def libraries(packages, environ, system_root):
    """(entry, directory, source, tried) for the first loader directory holding
    libascendcl.so (entry None when no package holds it); (None, None, None, tried) when no
    directory does."""
    tried = []
    for directory, source in loader_dirs(environ, system_root):
        tried.append(directory)
        if os.path.isfile(os.path.join(directory, LIBRARY)):
            return containing(packages, directory), directory, source, tried
    return None, None, None, tried


# -- the choice --------------------------------------------------------------------------------
def local_path(path, root):
    """A path MindSpore names under /usr/local/Ascend, below the stack's ascend_root."""
    if path.startswith(DEFAULT_ROOT):
        return os.path.join(root, path[len(DEFAULT_ROOT) :])
    return path


def home_of(compiler_file):
    return compiler_file[: -len(COMPILER_FILE)] if compiler_file.endswith(COMPILER_FILE) else compiler_file


def _words(entry):
    return "%s %s at %s" % (entry["name"], entry.get("version") or "(release unknown)", entry["home"])


def _guess(packages, order, compiler):
    for name in order:
        for entry in packages:
            if entry["name"] == name and (entry.get("compiler_present") or not compiler):
                return entry
    return None


def _choice(entry, basis, source, how, tried, checked=None, lib=None, probable=False):
    return {
        "package": entry["id"] if entry else None,
        "basis": basis,
        "source": source,
        "probable": probable,
        "how": how,
        "tried": tried,
        "checked": checked["id"] if checked else None,
        "libraries": lib["id"] if lib else None,
    }


def _by_loader(packages, environ, system_root, tried, lead, guess_order, compiler):
    """The CANN the dynamic loader would find, else the auditor's guess."""
    lib, directory, source, dirs = libraries(packages, environ, system_root)
    tried = tried + dirs
    if lib is not None:
        how = "%s%sthe dynamic loader finds %s in %s (%s): %s" % (
            lead,
            "; " if lead else "",
            LIBRARY,
            directory,
            source,
            _words(lib),
        )
        return _choice(lib, "environment", source, how, tried, lib=lib)
    guess = _guess(packages, guess_order, compiler)
    looked = "; no %s in %s" % (LIBRARY, ", ".join(dirs) if dirs else "LD_LIBRARY_PATH (unset)")
    if guess is None:
        what = "a toolkit or nnae (the CANN with a compiler MindSpore needs)" if compiler else "a CANN"
        how = "%s%s; nor %s under the stack's ascend_root" % (lead, looked, what)
        return _choice(None, "inference", None, how, tried, probable=True)
    how = "%s%s; probably %s, where its set_env.sh would point the environment" % (
        lead,
        looked,
        _words(guess),
    )
    return _choice(guess, "inference", None, how, tried, probable=True)


def choose_mindspore(lookup, lookup_error, packages, environ, root, system_root):
    """The CANN MindSpore would load (see the module's docstring)."""
    if lookup and lookup.get("paths"):
        tried = [local_path(p, root) for p in lookup["paths"]]
        for path in tried:
            if os.path.isfile(path):
                entry = containing(packages, home_of(path))
                if entry is not None:
                    how = "MindSpore's AscendEnvChecker tries %s: %s is the first present" % (
                        ", ".join(tried),
                        path,
                    )
                    # Its plugin's RPATH names the same directories before LD_LIBRARY_PATH.
                    return _choice(entry, "lookup", "AscendEnvChecker", how, tried, checked=entry, lib=entry)
        lead = "none of MindSpore's AscendEnvChecker paths exists (%s): it skips its version check" % (
            ", ".join(tried)
        )
        return _by_loader(packages, environ, system_root, tried, lead, TOOLKIT_GUESS, True)
    if lookup and lookup.get("env"):
        variable = lookup["env"]
        value = environ.get(variable)
        if value:
            path = value + COMPILER_FILE  # as MindSpore joins them (a trailing / still resolves)
            entry = containing(packages, value) if os.path.isfile(path) else None
            if entry is not None:
                lib = libraries(packages, environ, system_root)[0]
                how = "MindSpore's AscendEnvChecker reads $%s/compiler/version.info: %s" % (
                    variable,
                    _words(entry),
                )
                return _choice(entry, "environment", variable, how, [path], checked=entry, lib=lib)
            lead = "$%s = %s holds no compiler/version.info: MindSpore skips its version check" % (
                variable,
                value,
            )
            return _by_loader(packages, environ, system_root, [path], lead, TOOLKIT_GUESS, True)
        lead = "$%s is not set in the stack's environment: MindSpore skips its version check" % variable
        return _by_loader(packages, environ, system_root, [], lead, TOOLKIT_GUESS, True)
    lead = "MindSpore's own lookup could not be read (%s)" % (lookup_error or "unknown")
    return _by_loader(packages, environ, system_root, [], lead, TOOLKIT_GUESS, True)


def choose_loader_only(who, packages, environ, system_root):
    """A framework that names no CANN itself (MindSpore Lite): the dynamic loader decides."""
    lead = "%s names no CANN path or variable; its libraries need %s" % (who, LIBRARY)
    return _by_loader(packages, environ, system_root, [], lead, LITE_GUESS, False)


def choices(sys_path, packages, environ, root, system_root):
    """{framework package: choice} for MindSpore and MindSpore Lite where installed."""
    out = {}
    ms = find_package(sys_path, "mindspore")
    if ms is not None:
        lookup, error = read_lookup(ms)
        out["mindspore"] = choose_mindspore(lookup, error, packages, environ, root, system_root)
    if find_package(sys_path, "mindspore_lite") is not None:
        out["mindspore_lite"] = choose_loader_only("MindSpore Lite", packages, environ, system_root)
    return out
