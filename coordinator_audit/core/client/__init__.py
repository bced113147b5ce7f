"""The consumer side: the Java consumer's group protocol loop (eager and cooperative) and the
built-in assignors (range, roundrobin, sticky, cooperative-sticky) under `assignors/`."""
