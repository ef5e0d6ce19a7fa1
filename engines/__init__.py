"""bakeoff's built-in engine adapters, registered through the ``bakeoff.engines`` entry-point group
exactly like third-party plugins. Each module imports cheaply; heavy imports happen where used."""
