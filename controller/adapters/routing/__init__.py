"""Traffic routing on Gateway API HTTPRoutes (:mod:`.gateway`) and Gateway API Inference Extension InferencePools
(:mod:`.inference_pool`), with a replica-ratio fallback."""
