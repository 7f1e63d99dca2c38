"""Rules: small pure functions in one registry, each Deployment → Findings."""
