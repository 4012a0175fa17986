"""Agent mode: typed nodes worked by processors, a dependency-ready scheduler, and tools."""
