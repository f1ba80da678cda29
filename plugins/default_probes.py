"""The built-in probes, registered through the same hook as any plugin's."""

from auditor.hookspecs import hookimpl


@hookimpl
def auditor_probes() -> list[str]:
    return ["auditor.probes.ppo_policy", "auditor.probes.action_sampler", "auditor.probes.obs_normalizer"]
