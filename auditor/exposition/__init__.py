"""What the auditor exposes to the monitoring its users run: the Prometheus families of a
cycle (families) and their rendering (prometheus), served by the daemon and written as a
node_exporter textfile by ``audit --textfile``."""
