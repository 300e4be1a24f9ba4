"""Traffic planner: paths (and RoCE source ports) for collective flows that keep the most
loaded link as light as possible; see README.md. Entry points: ``traffic_planner.plan.plan_flows``
and the ``c4 plan`` command."""
