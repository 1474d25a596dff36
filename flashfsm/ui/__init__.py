"""`flashfsm ui`: a local web view of a store, served from the store and updated live.

`create_app(UiConfig(url))` is the ASGI application (Starlette) and `StoreIndex` what it
knows of the store; `flashfsm ui` serves it with uvicorn. See docs/ui.md.
"""

from flashfsm.ui.app import UiConfig, create_app
from flashfsm.ui.index import StoreIndex

__all__ = ["StoreIndex", "UiConfig", "create_app"]
