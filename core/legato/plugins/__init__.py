"""Plugins: `host` (finds and loads backends and op packs through entry points and pluggy),
`hookspecs` (the hooks a plugin implements), `validators` (validators of emitted artifacts)
and `context` (the registry and the plugin host in one object, passed to library
functions). `legato.plugin_api` is the surface a plugin may import.
"""
