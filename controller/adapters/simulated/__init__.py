"""The simulated fleet behind the ports: metrics, router, cluster and forecaster (:mod:`.fleet`) and the load tester
(:mod:`.loadtester`)."""
