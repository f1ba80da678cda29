"""The CANN software a stack could use: every package under its ``ascend_root`` (toolkit,
nnae, nnrt, side-by-side releases), the ones its environment names elsewhere, and which of
them each framework in the stack would load, on what basis (``choice``, from
``_cann_lookup``).

Layouts, tried in this order for the legacy top-level fields (the one ``$ASCEND_HOME_PATH``
points at first, since that is what MindSpore 2.10 reads):

- ``ascend-toolkit``: ``ascend-toolkit/latest/{compiler,runtime,opp,...}/version.info`` and
  ``ascend-toolkit/latest/<arch>-linux/ascend_toolkit_install.info`` (up to CANN 8.3);
- ``cann``: CANN 8.5, ``cann/<arch>-linux/ascend_toolkit_install.info``;
- ``share/info``: CANN 9.x, component files in ``<home>/share/info/<pkg>/version.info``;
- ``latest``: the older ``<root>/latest`` layout MindSpore 2.0 also looks at.

``packages`` lists one entry per installed package: ``id`` (its path relative to
``ascend_root``, or its absolute path when it lies elsewhere), ``name``, ``home``, ``real``
(the resolved home: ``latest`` is a link), ``version`` (the release, read from the
package's own component files, ``version_source`` says which; the install-info file, an
outer label that can be stale, only when no component names it, and its value is kept as
``install_version``), ``compiler_version`` (``Version=`` of ``compiler/version.info``: the
number MindSpore compares, major.minor, with its supported list; before CANN 8.2 an
internal number, 8.0.0 is 7.6.0.1.220). Every consumer (rules, CLI) takes a package's
release from here, so the fingerprint, the rules and the CLI say the same.

``choice`` maps each framework installed in the stack (``mindspore``, ``mindspore_lite``) to
the package it would load: ``package`` (an ``id``), ``basis`` (``lookup``, ``environment`` or
``inference``), ``source``, ``probable``, ``how``, ``tried``, ``checked``, ``libraries``.

In ``version_cfg`` a ``[internal:release]`` value becomes ``["internal", "release"]``
(several such groups: a list of those; ``[]``: an empty list).
"""

import glob
import os
import platform
import sys

from auditor.plugins.collectors._cann_lookup import LIBRARY, choices, containing, library_home, loader_dirs
from auditor.plugins.collectors._files import (
    Unreadable,
    ascend_path,
    field,
    parse_codes,
    parse_groups,
    parse_kv,
    read_kv,
    read_text,
    system_path,
)

NAME = "cann"
HOMES = (("ascend-toolkit", "ascend-toolkit/latest"), ("cann", "cann"), ("latest", "latest"))
HOME_VARIABLES = ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")
INSTALL_FIELDS = ("version", "innerversion", "compatible_version", "arch", "os", "path", "package_name")


def collect(context):
    unknown = {}
    root = context.get("ascend_root") or "/usr/local/Ascend"
    environ = context.get("environ") or {}
    system_root = context.get("system_root") or "/"
    doc = {
        "root": root,
        "home": None,
        "layout": None,
        "other_homes": [],
        "version": None,
        "version_source": None,
        "compiler_version": None,
        "toolkit": None,
        "components": {},
        "version_cfg": None,
        "nnae": None,
        "nnrt": None,
        "install_registry": None,
        "packages": [],
        "env_home": None,
        "choice": {},
        "unknown": unknown,
    }
    homes = find_homes(root, environ)
    if homes:
        (layout, home), others = homes[0], homes[1:]
        doc.update(home=home, layout=layout, other_homes=[path for _, path in others])
        doc["toolkit"] = _install_info(
            _candidates(home, "ascend_toolkit_install.info"), "toolkit", unknown, _machine(context)
        )
        doc["components"] = _components(home, layout, unknown)
        compiler = doc["components"].get("compiler")
        if compiler is not None:
            doc["compiler_version"] = compiler.get("Version")
            if doc["compiler_version"] is None:
                unknown["compiler_version"] = "%s: no Version= line" % _component_file(
                    home, layout, "compiler"
                )
        elif "components.compiler" in unknown:
            unknown["compiler_version"] = unknown["components.compiler"]
        else:
            unknown["compiler_version"] = "%s: missing" % _component_file(home, layout, "compiler")
        doc["version_cfg"] = _version_cfg(os.path.join(home, "version.cfg"), unknown)
    else:
        reason = "%s: no CANN toolkit (looked for %s)" % (root, ", ".join(rel for _, rel in HOMES))
        for key in ("home", "layout", "toolkit", "compiler_version", "version_cfg"):
            unknown[key] = reason
    nnae_home = ascend_path(context, "nnae", "latest")
    doc["nnae"] = _install_info(
        _candidates(nnae_home, "ascend_nnae_install.info"), "nnae", unknown, _machine(context)
    )
    if doc["nnae"] is not None:
        # MindSpore 2.0 checks nnae's compiler before the toolkit's.
        path = os.path.join(nnae_home, "compiler", "version.info")
        try:
            doc["nnae"]["compiler_version"] = field(
                read_kv(path), "Version", path, unknown, "nnae.compiler_version"
            )
        except Unreadable as exc:
            doc["nnae"]["compiler_version"] = None
            unknown["nnae.compiler_version"] = str(exc)
    doc["nnrt"] = _install_info(
        _candidates(ascend_path(context, "nnrt", "latest"), "ascend_nnrt_install.info"),
        "nnrt",
        unknown,
        _machine(context),
    )
    doc["packages"], doc["env_home"] = packages(context, root, environ, unknown)
    doc["version"], doc["version_source"] = _release(doc)
    if doc["version"] is None:
        unknown["version"] = unknown["version_source"] = (
            "%s: no CANN toolkit, nnae or nnrt release version found" % root
        )
    registry = system_path(context, "etc/Ascend/ascend_cann_install.info")
    try:
        doc["install_registry"] = read_kv(registry)
    except Unreadable as exc:
        unknown["install_registry"] = str(exc)
    doc["choice"] = choices(context.get("sys_path") or sys.path, doc["packages"], environ, root, system_root)
    return doc


# Every place a CANN package lives under ascend_root, with the install-info file naming its
# release. MindSpore 2.0 looks at nnae/latest, ascend-toolkit/latest, latest (in that order).
PACKAGES = (
    ("nnae", "nnae/latest", "ascend_nnae_install.info"),
    ("ascend-toolkit", "ascend-toolkit/latest", "ascend_toolkit_install.info"),
    ("cann", "cann", "ascend_toolkit_install.info"),
    ("latest", "latest", "ascend_toolkit_install.info"),
    ("nnrt", "nnrt/latest", "ascend_nnrt_install.info"),
)
# Releases installed side by side: <root>/<dir>/<release>/ (the ``latest`` link points at one)
# and <root>/cann-<release>/ (the ``cann`` link points at one).
RELEASE_DIRS = (
    ("nnae", "nnae", "ascend_nnae_install.info"),
    ("ascend-toolkit", "ascend-toolkit", "ascend_toolkit_install.info"),
    ("nnrt", "nnrt", "ascend_nnrt_install.info"),
)
# Component files whose version_dir names the package's release, most telling first.
RELEASE_COMPONENTS = ("compiler", "runtime", "opp")


def packages(context, root, environ, unknown):
    """([one entry per installed CANN package], the one ``$ASCEND_HOME_PATH`` names or None).

    Found: the fixed places under ascend_root (PACKAGES), the releases installed beside them
    (RELEASE_DIRS, ``cann-*``), the home ``$ASCEND_HOME_PATH`` / ``$ASCEND_TOOLKIT_HOME``
    names, and the home of every directory on the loader's path that holds ``libascendcl.so``
    (a CANN installed where the environment says, outside ascend_root). A directory reached
    twice (``latest`` and the release it links to) is one entry, under the first name."""
    out = []
    seen = set()

    def add(name, home, relative, info_name):
        real = os.path.realpath(home)
        if real in seen or not _is_home(home):
            return None
        seen.add(real)
        entry = _package(name, home, relative, info_name, context, unknown)
        out.append(entry)
        return entry

    for name, relative, info_name in PACKAGES:
        add(name, os.path.join(root, relative), relative, info_name)
    for name, directory, info_name in RELEASE_DIRS:
        for child in _listdir(os.path.join(root, directory)):
            if child != "latest":
                add(name, os.path.join(root, directory, child), directory + "/" + child, info_name)
    for child in _listdir(root):
        if child.startswith("cann-"):
            add("cann", os.path.join(root, child), child, "ascend_toolkit_install.info")
    env_home = None
    for variable in HOME_VARIABLES:
        value = environ.get(variable)
        if not value:
            continue
        home = value.rstrip("/") or value
        match = containing(out, home) if os.path.isdir(home) else None
        if match is None and os.path.isdir(home):
            match = add(_guess_name(home), home, None, "ascend_toolkit_install.info")
        env_home = {"variable": variable, "path": value, "package": match["id"] if match else None}
        break
    if env_home is None:
        unknown["env_home"] = "%s not set in the stack's environment" % " and ".join(HOME_VARIABLES)
    for directory, _ in loader_dirs(environ, context.get("system_root") or "/"):
        if os.path.isfile(os.path.join(directory, LIBRARY)) and containing(out, directory) is None:
            home = library_home(directory)
            add(_guess_name(home), home, None, "ascend_toolkit_install.info")
    _mark_links(out)
    return out, env_home


def _mark_links(packages):
    """A home whose compiler is a link into another home found here (MindIE's ``latest/``, a
    real directory of links into ``ascend-toolkit/<release>/``) is that install reached twice:
    ``links_into`` names the other entry, so a person is not told it is installed beside."""
    for entry in packages:
        if not entry["compiler_present"]:
            continue
        where = os.path.realpath(os.path.dirname(entry["compiler_file"]))
        for other in packages:
            home = other["real"].rstrip("/") + "/"
            if other is not entry and where.startswith(home) and not entry["real"].startswith(home):
                entry["links_into"] = other["id"]
                break


def _listdir(path):
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _guess_name(home):
    parts = os.path.realpath(home).split(os.sep) + home.split(os.sep)
    for name in ("nnae", "nnrt", "ascend-toolkit"):
        if name in parts:
            return name
    return "cann" if any(p.startswith("cann") for p in parts) else "latest"


def _package(name, home, relative, info_name, context, unknown):
    layout = "share/info" if os.path.isdir(os.path.join(home, "share", "info")) else name
    compiler_file = _component_file(home, layout, "compiler")
    key = relative or home
    entry = {
        "id": key,
        "name": name,
        "home": home,
        "real": os.path.realpath(home),
        "relative": relative,
        "version": None,
        "version_source": None,
        "compiler_file": compiler_file,
        "compiler_present": os.path.lexists(compiler_file),
        "compiler_version": None,
    }
    scratch = {}
    info = _install_info(_candidates(home, info_name), "info", scratch, _machine(context))
    if info:
        # The install-info file is the only place naming the package's build code and the
        # codes it works with (the cann-driver rule); its version is an outer label.
        for name in ("version", "innerversion", "compatible_version"):
            if info.get(name):
                entry["install_version" if name == "version" else name] = info[name]
    components = {}
    for component in RELEASE_COMPONENTS:
        path = _component_file(home, layout, component)
        if not os.path.lexists(path):
            continue
        try:
            components[component] = read_kv(path)
        except Unreadable as exc:
            if component == "compiler":
                entry["compiler_error"] = str(exc)
                unknown["packages.%s.compiler_version" % key] = str(exc)
    compiler = components.get("compiler") or {}
    if entry["compiler_present"] and "compiler_error" not in entry:
        entry["compiler_version"] = compiler.get("Version")
        if entry["compiler_version"] is None:
            entry["compiler_error"] = "%s: no Version= line" % compiler_file
            unknown["packages.%s.compiler_version" % key] = entry["compiler_error"]
    for component in RELEASE_COMPONENTS:
        if (components.get(component) or {}).get("version_dir"):
            entry["version"] = components[component]["version_dir"]
            entry["version_source"] = "%s/version.info version_dir" % component
            break
    else:
        if layout == "share/info" and compiler.get("Version"):
            # CANN 9.x: no version_dir, and Version= is the release itself.
            entry["version"], entry["version_source"] = compiler["Version"], "compiler/version.info Version"
        elif entry.get("install_version"):
            entry["version"] = entry["install_version"]
            entry["version_source"] = "%s (no component file names the release)" % os.path.basename(
                info["file"]
            )
    if entry["version"] is None:
        unknown["packages.%s.version" % key] = (
            scratch.get("info.version")
            or scratch.get("info")
            or ("%s: no component version_dir and no install-info file" % home)
        )
    return entry


def _machine(context):
    return platform.machine()


def find_homes(root, environ):
    """[(layout, directory)] of the CANN toolkit homes present, the preferred one first."""
    found = []
    for name, relative in HOMES:
        path = os.path.join(root, relative)
        if _is_home(path):
            found.append((_layout(path, name), path))
    preferred = None
    for variable in HOME_VARIABLES:
        value = environ.get(variable)
        if value and os.path.isabs(value) and _is_home(value):
            preferred = os.path.realpath(value)
            break
    if preferred is None:
        return found
    found.sort(key=lambda item: os.path.realpath(item[1]) != preferred)
    parts = preferred.split(os.sep)
    if (not found or os.path.realpath(found[0][1]) != preferred) and not ({"nnae", "nnrt"} & set(parts)):
        # The environment points at a toolkit outside ascend_root: that is the one in use.
        guess = (
            "ascend-toolkit"
            if "ascend-toolkit" in parts
            else ("cann" if any(p.startswith("cann") for p in parts) else "latest")
        )
        found.insert(0, (_layout(preferred, guess), preferred))
    return found


# Component directories of a CANN package (the driver's and firmware's version.info under an
# ascend_root must not make the root itself look like a CANN home).
COMPONENTS = ("compiler", "runtime", "opp", "toolkit", "opp_kernel", "hccl", "fwkacllib", "acllib", "atc")


def _is_home(path):
    if not os.path.isdir(path):
        return False
    return bool(
        os.path.isdir(os.path.join(path, "share", "info"))
        or os.path.isfile(os.path.join(path, "version.cfg"))
        or any(os.path.isfile(os.path.join(path, c, "version.info")) for c in COMPONENTS)
        or glob.glob(os.path.join(path, "*-linux", "ascend_*_install.info"))
        or glob.glob(os.path.join(path, "ascend_*_install.info"))
    )


def _layout(path, name):
    return "share/info" if os.path.isdir(os.path.join(path, "share", "info")) else name


def _candidates(home, filename):
    """Where an install-info file may be: ``<home>/<arch>-linux/`` or ``<home>/`` itself."""
    return sorted(glob.glob(os.path.join(home, "*-linux", filename))) + [os.path.join(home, filename)]


def _install_info(candidates, key, unknown, machine):
    present = [p for p in candidates if os.path.lexists(p)]
    if not present:
        home, filename = os.path.split(candidates[-1])
        if not os.path.isdir(home):
            unknown[key] = "%s: missing" % home
        else:
            unknown[key] = "%s: missing (nor in %s)" % (os.path.join(home, "<arch>-linux", filename), home)
        return None
    # Several architectures installed side by side: the one this host runs.
    present.sort(key=lambda p: os.path.basename(os.path.dirname(p)) != machine + "-linux")
    path = present[0]
    try:
        values = read_kv(path)
    except Unreadable as exc:
        unknown[key] = str(exc)
        return None
    info = {"file": path}
    for name in INSTALL_FIELDS:
        convert = parse_codes if name == "compatible_version" else None
        info[name] = field(values, name, path, unknown, "%s.%s" % (key, name), convert)
    return info


def _component_base(home, layout):
    return os.path.join(home, "share", "info") if layout == "share/info" else home


def _component_file(home, layout, name):
    return os.path.join(_component_base(home, layout), name, "version.info")


def _components(home, layout, unknown):
    base = _component_base(home, layout)
    components = {}
    try:
        names = sorted(os.listdir(base))
    except OSError as exc:
        unknown["components"] = "%s: cannot list (%s)" % (base, exc.strerror or exc)
        return components
    for name in names:
        path = os.path.join(base, name, "version.info")
        if not os.path.lexists(path):
            continue
        try:
            components[name] = read_kv(path)
        except Unreadable as exc:
            components[name] = None
            unknown["components." + name] = str(exc)
    return components


def _version_cfg(path, unknown):
    try:
        values = parse_kv(read_text(path))
    except Unreadable as exc:
        unknown["version_cfg"] = str(exc)
        return None
    except ValueError as exc:
        unknown["version_cfg"] = "%s: garbled (%s)" % (path, exc)
        return None
    parsed = {}
    for key, value in values.items():
        try:
            groups = [",".join(group).split(":") for group in parse_groups(value)]
        except ValueError:
            parsed[key] = value
            continue
        parsed[key] = groups[0] if len(groups) == 1 else groups
    return parsed


def _release(doc):
    """The CANN release of the legacy top-level fields and where it came from: the package at
    ``home`` (the toolkit), else nnae, else nnrt, each as its ``packages`` entry says (its
    component files first), so the top level and the packages never disagree."""
    by_real = {p["real"]: p for p in doc["packages"]}
    candidates = []
    if doc["home"]:
        candidates.append(by_real.get(os.path.realpath(doc["home"])))
    for name in ("nnae", "nnrt"):
        candidates.append(next((p for p in doc["packages"] if p["name"] == name), None))
    for entry in candidates:
        if entry is not None and entry.get("version"):
            return entry["version"], "%s: %s" % (entry["id"], entry["version_source"])
    return None, None
