"""The Gateway API, served on the agent's Envoys: what the cluster's GatewayClasses, Gateways, routes and
ReferenceGrants ask for, turned into Envoy resources and the statuses the specification requires.

A pure core, like the translator: `program(state)` takes what the agent watched and gives back what to serve
and what to write, with no I/O, so it is tested without a cluster and run again on every change.
"""
