"""Search: the optimizer (Gaussian process over the enumerated config space, its kernel and encoding), the
guardrails every proposal passes, and the screening of the advisor's proposals. Pure."""
