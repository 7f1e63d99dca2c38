"""Rule modules: each registers its functions with @servepilot.checks.registry.rule on import."""
