"""The walk of a module tree with statistics: the components' declared protocol, the one walker, and the
exchangeable state that the component rules themselves use."""
