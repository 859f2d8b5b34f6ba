"""The netns driver: dynamic nodes as network namespaces on this machine."""
