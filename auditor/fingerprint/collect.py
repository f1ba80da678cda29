"""Fingerprinting a stack: ask its worker to run the collector modules, add what the worker
said about itself when it started.

The document has one section per collector (``host``, ``packages``, ``framework``, ``cann``,
``driver``, ``firmware``, ``npu_smi``, ``environment``, plus any plugin's; each is described
in its module's docstring in ``auditor.plugins.collectors``) and ``runtime``, from the
worker's hello. A value that could not be determined is null, with the reason in the
section's ``unknown`` (``{"driver": {"version": null, "unknown": {"version":
".../version.info: missing"}}}``); a collector that failed is ``{"error": ...}``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from auditor.common.redact import REDACTED, redact_argv, redact_fingerprint
from auditor.config.tables import FilesConfig, SecretsConfig, StackConfig
from auditor.stacks.session import Reach
from auditor.stacks.worker import StackWorker

# npu-smi's runs (info, a board view per NPU, the chip map) take at most this many of its
# timeouts in all: the npu_smi collector stops there (auditor.plugins.collectors.npu_smi.CALLS).
NPU_SMI_CALLS = 3
SLACK = 30.0


def context_for(
    stack: StackConfig, secrets: SecretsConfig | None = None, files: FilesConfig | None = None
) -> dict[str, Any]:
    """The collectors' context for a stack (the worker adds its own environment)."""
    secrets = secrets or SecretsConfig()
    limits = (files or FilesConfig()).limits
    return {
        "ascend_root": stack.ascend_root,
        "system_root": stack.system_root,
        "npu_smi": stack.npu_smi,
        "timeout": stack.npu_smi_timeout,
        "redact_names": list(secrets.names),
        "redact_values": list(secrets.values),
        "models": list(stack.models),
        # How much of a served file the models collector reads, and for how long ([files]).
        "file_max_bytes": limits.max_bytes,
        "file_timeout": limits.timeout,
    }


def deadline_for(stack: StackConfig, base: float) -> float:
    """Long enough for every npu-smi call to hit its own timeout and still be reported."""
    return max(base, NPU_SMI_CALLS * stack.npu_smi_timeout + SLACK)


def collect(
    worker: StackWorker,
    stack: StackConfig,
    collectors: Sequence[str],
    timeout: float | None = None,
    secrets: SecretsConfig | None = None,
    files: FilesConfig | None = None,
) -> dict[str, Any]:
    """The fingerprint document of a started worker's stack, secrets redacted (``[secrets]``
    adds patterns) before anyone stores, logs, compares or sends it.

    Raises ``auditor.stacks.worker.WorkerError`` when the worker gives no answer (timeout,
    crash); a collector's own failure stays inside its section.
    """
    secrets = secrets or SecretsConfig()
    reply = worker.request(
        "fingerprint",
        timeout=deadline_for(stack, timeout if timeout is not None else worker.request_timeout),
        collectors=list(collectors),
        context=context_for(stack, secrets, files),
    )
    document = dict(reply.result.get("fingerprint") or {})
    if not stack.models and document.get("models", {}).get("files") == {}:
        del document["models"]  # no watched models: the document stays what it was before the watch
    document["runtime"] = {k: v for k, v in worker.hello.items() if k != "pid"}
    if worker.is_remote:
        document["connection"] = connection(worker)
    return redact_fingerprint(document, secrets.names, secrets.values)


def connection(worker: StackWorker) -> dict[str, Any]:
    """How a remote stack was reached: its host's name, the transport, the destination and
    the address the connection really went to (the server's side of ssh's SSH_CONNECTION;
    the client's port changes with every connection and is left out)."""
    host = worker.host
    section: dict[str, Any] = {"host": worker.stack.host, "transport": host.transport if host else None}
    if host is not None and host.ssh:
        section["destination"] = host.ssh + (f":{host.port}" if host.port else "")
    elif host is not None:
        section["command"] = redact_argv(host.command, REDACTED)  # stored: never a token it holds
    words = str((worker.remote or {}).get("ssh_connection") or "").split()
    section["address"] = f"{words[2]}:{words[3]}" if len(words) == 4 else None
    return section


def fingerprint_stack(reach: Reach, name: str, collectors: Sequence[str]) -> dict[str, Any]:
    """Start the worker of stack ``name`` (on its host, as the config says), fingerprint it,
    stop it. Raises WorkerError."""
    with reach.worker(name) as worker:
        worker.start()
        config = reach.config
        return collect(worker, reach.stack(name), collectors, secrets=config.secrets, files=config.files)


def unknowns(document: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Section -> field -> reason, for every value the collectors could not determine."""
    found: dict[str, dict[str, str]] = {}
    for name, section in document.items():
        if isinstance(section, dict) and isinstance(section.get("unknown"), dict) and section["unknown"]:
            found[name] = dict(section["unknown"])
    return found


def errors(document: dict[str, Any]) -> dict[str, str]:
    """Section -> error, for every collector that failed."""
    return {
        name: str(section["error"])
        for name, section in document.items()
        if isinstance(section, dict) and "error" in section
    }
