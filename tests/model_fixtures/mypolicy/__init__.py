"""A user's own policy package, as training code would hold it: ``nets`` builds the networks
(the factory a ``[models.NAME] train`` table names). Not one of the built-in probes: other
activations, heads, fp16 compute, a greedy argmax head, a normalizer folded in."""
