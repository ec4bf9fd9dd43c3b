"""The layoutlab CDK app: four stacks per environment (data, compute, pipeline, observability)."""
