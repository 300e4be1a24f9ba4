"""Why, not only where: node health findings (rules on hard evidence, a peer model for "unlike
its peers") and their join to the timing reports as ``causes``."""
