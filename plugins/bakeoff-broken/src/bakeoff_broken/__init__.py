"""bakeoff-broken: a plugin whose adapter cannot be imported (a test fixture, never for use)."""
