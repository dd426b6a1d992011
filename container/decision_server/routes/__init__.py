"""HTTP routers, one module per surface; app.py mounts them with include_router."""
