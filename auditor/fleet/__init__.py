"""A fleet of hosts as one thing: its groups' members compared with each other (peers)."""
